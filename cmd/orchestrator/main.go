// Command orchestrator runs the saga orchestrator, its demo, the reference
// participants and a development broker. See `orchestrator --help`.
package main

import (
	"os"

	"github.com/sagaflow/sagaflow/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
