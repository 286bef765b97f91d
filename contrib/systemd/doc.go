// Package systemd holds no Go code: this directory ships the systemd
// units of cninet's thick mode, which `make install` installs.
//
//   - cninet.service: the daemon (Type=notify, KillMode=mixed, SIGHUP
//     reloads the conf dir, a stop timeout covering the drain and the
//     rollback after it).
//   - cninet.socket: the socket the shim connects to, passed to the
//     daemon by socket activation.
//   - install_test.go: `make install` into a temp DESTDIR, and the units'
//     settings agreeing with each other and with the daemon's flags.
package systemd
