// Package fakecni is a scripted, recording cni.CNI for tests: canned
// results, scripted failures, and the calls it received with their decoded
// options.
//
// # Files
//
//	fakecni.go   CNI: canned results, scripted failures, recorded calls
package fakecni
