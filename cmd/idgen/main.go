// Command idgen is the ID service, the default assembly of package server:
// the built-in strategies (UNORDERED, ORDERED, SLOW_ORDERED, SNOWFLAKE) and
// plugins (audit, stats). Run `idgen --help` for the settings; see
// README.md.
package main

import "github.com/idgen/idgen/server"

// version is set at build time with -ldflags "-X main.version=..."
// (./build.sh stamps it from git).
var version = "dev"

func main() { server.Main(server.Options{Version: version}) }
