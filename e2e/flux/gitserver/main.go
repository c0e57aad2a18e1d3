// Command hap-gitserver serves the Git repositories under a directory over HTTP on loopback, with
// Flux's own test Git server (github.com/fluxcd/pkg/gittestserver), for hap-operator's Flux tests.
//
//	hap-gitserver --root DIR
//
// A push creates a repository that does not exist yet. The server prints its base URL
// (http://127.0.0.1:PORT) as the first line on stdout, then serves until SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/fluxcd/pkg/gittestserver"
)

func main() {
	root := flag.String("root", "", "directory holding the bare repositories")
	flag.Parse()
	if *root == "" {
		fmt.Fprintln(os.Stderr, "hap-gitserver: --root is required")
		os.Exit(2)
	}
	srv := gittestserver.NewGitServer(*root).AutoCreate()
	// httptest listens on 127.0.0.1 with a port of the kernel's choosing.
	if err := srv.StartHTTP(); err != nil {
		fmt.Fprintf(os.Stderr, "hap-gitserver: start HTTP: %v\n", err)
		os.Exit(1)
	}
	defer srv.StopHTTP()
	fmt.Println(srv.HTTPAddress())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
