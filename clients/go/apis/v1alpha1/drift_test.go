package v1alpha1_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hap-operator/hap-operator/clients/go/apis/v1alpha1"
	"github.com/hap-operator/hap-operator/clients/go/internal/typegen"
)

const crdPath = "../../../../crds/accountpool.io.yaml"

// The committed types are exactly what the generator makes of the CRDs in this checkout: a field
// added to (or removed from) the operator's CRDs fails here until `make go-types` is run.
func TestGeneratedTypesMatchTheCRDs(t *testing.T) {
	crds, err := os.ReadFile(crdPath)
	if err != nil {
		t.Fatal(err)
	}
	want, err := typegen.Generate(crds, v1alpha1.Group, v1alpha1.Version, "v1alpha1", "crds/accountpool.io.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("zz_generated.types.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(string(got), "\n")
		for i := 0; i < len(wl) || i < len(gl); i++ {
			var w, g string
			if i < len(wl) {
				w = wl[i]
			}
			if i < len(gl) {
				g = gl[i]
			}
			if w != g {
				t.Fatalf("clients/go/apis/v1alpha1/zz_generated.types.go is stale against %s (first difference at line %d:\n  committed: %q\n  generated: %q)\nrun `make go-types`", filepath.Base(crdPath), i+1, g, w)
			}
		}
	}
}

// A claim as the operator writes it decodes into the types with nothing left over, and encodes
// back to the same JSON.
func TestAClaimRoundTrips(t *testing.T) {
	in := `{"apiVersion":"accountpool.io/v1alpha1","kind":"AccountClaim","metadata":{"name":"c","namespace":"n"},` +
		`"spec":{"globalAccount":"ga","plan":"aws","platformRegion":"cf-eu11"},` +
		`"status":{"bindingNamespace":"garden-p","conditions":[{"lastTransitionTime":"2026-01-02T03:04:05Z","message":"bound","observedGeneration":1,"reason":"Bound","status":"True","type":"Ready"}],` +
		`"credentialsBindingName":"aws-1","decision":"Claimed","euAccess":false,"hyperscalerType":"aws","matchedRule":{"entry":"aws","index":1},"observedGeneration":1,"phase":"Bound","preference":1,"shared":false}}`
	dec := json.NewDecoder(strings.NewReader(in))
	dec.DisallowUnknownFields()
	var c v1alpha1.AccountClaim
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Status == nil || *c.Status.Phase != v1alpha1.AccountClaimStatusPhaseBound || *c.Status.CredentialsBindingName != "aws-1" {
		t.Fatalf("decoded %+v", c.Status)
	}
	out, err := json.Marshal(&c)
	if err != nil {
		t.Fatal(err)
	}
	var a, b map[string]any
	_ = json.Unmarshal([]byte(in), &a)
	_ = json.Unmarshal(out, &b)
	delete(b["metadata"].(map[string]any), "creationTimestamp")
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if !bytes.Equal(ja, jb) {
		t.Fatalf("round trip changed the claim:\n in: %s\nout: %s", ja, jb)
	}
}
