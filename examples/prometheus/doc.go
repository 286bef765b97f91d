// Command prometheus shows how a program that embeds cninet exports its
// metrics to Prometheus: an OpenTelemetry SDK MeterProvider with the OTel
// Prometheus exporter as its reader goes into cninet.Config.MeterProvider,
// and promhttp serves what the exporter collects on /metrics. It calls
// Status every --status-every so that cninet_network_ready stays current;
// a real runner calls Setup and Teardown too, and their counts, durations
// and cleanup counts appear next to it.
//
//	go run . --conf-dir /etc/cni/net.d --network nomad
//	curl -s http://127.0.0.1:9464/metrics | grep ^cninet_
//
// cninet itself depends only on the OpenTelemetry API; the SDK and the
// exporter are this program's dependencies (this directory is a module of
// its own).
//
// # Files
//
//	main.go   the MeterProvider, the exporter, the /metrics server, the Status loop
package main
