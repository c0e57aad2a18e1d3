// Command hap-gen-types writes apis/v1alpha1/zz_generated.types.go from the operator's CRDs:
//
//	go run ./cmd/hap-gen-types -crds ../../crds/accountpool.io.yaml -out apis/v1alpha1/zz_generated.types.go
//
// (`make go-types` at the repository root runs exactly that.)
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/hap-operator/hap-operator/clients/go/internal/typegen"
)

func main() {
	crds := flag.String("crds", "../../crds/accountpool.io.yaml", "the CRD bundle to read")
	out := flag.String("out", "apis/v1alpha1/zz_generated.types.go", "the Go file to write")
	flag.Parse()
	in, err := os.ReadFile(*crds)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hap-gen-types:", err)
		os.Exit(1)
	}
	src, err := typegen.Generate(in, "accountpool.io", "v1alpha1", "v1alpha1", "crds/accountpool.io.yaml")
	if err != nil {
		fmt.Fprintln(os.Stderr, "hap-gen-types:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "hap-gen-types:", err)
		os.Exit(1)
	}
}
