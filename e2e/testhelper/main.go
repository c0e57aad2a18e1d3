// Command testhelper evaluates Kubernetes objects the way GitOps tools do, and plays a pod that
// POSTs to the admission webhook, for hap-operator's e2e tests:
//
//	testhelper kstatus [FILE|-]                      Flux: kstatus status.Compute per object
//	testhelper argohealth --script health.lua [FILE|-]  Argo CD: a custom Lua health check per object
//	testhelper https-post (--ca FILE|--insecure) --body JSON URL...  a POST without a client certificate
//
// For kstatus and argohealth, input is JSON: one object or a List (what `kubectl get -o json`
// prints), from FILE or stdin. Output is one JSON object per input object and line, in input order. Exit codes: 0 evaluated,
// 1 an object could not be evaluated (the line says why), 2 usage or unreadable input.
//
// Real Flux and Argo CD cannot run on the test control plane (see
// ../shared/reference/real-control-plane.md §16); this runs their decision code instead: Flux's
// own kstatus library, and Argo CD's interpreter (gopher-lua) set up as Argo CD sets it up.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  testhelper kstatus [FILE|-]
  testhelper argohealth --script HEALTH_LUA [FILE|-]
  testhelper https-post (--ca FILE | --insecure) (--body JSON | --body-file FILE) URL...`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// result is one output line.
type result struct {
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	Status    string `json:"status"`
	Message   string `json:"message"`
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var eval func(obj map[string]interface{}) (result, error)
	rest := args[1:]
	switch args[0] {
	case "kstatus":
		eval = kstatus
	case "https-post":
		return httpsPost(args[1:], stdout, stderr)
	case "argohealth":
		var script string
		var err error
		script, rest, err = scriptFlag(rest)
		if err != nil {
			fmt.Fprintf(stderr, "testhelper argohealth: %v\n%s\n", err, usage)
			return 2
		}
		eval = func(obj map[string]interface{}) (result, error) { return argoHealth(script, obj) }
	case "-h", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "testhelper: unknown command %q\n%s\n", args[0], usage)
		return 2
	}
	if len(rest) > 1 {
		fmt.Fprintf(stderr, "testhelper %s: at most one input file\n%s\n", args[0], usage)
		return 2
	}
	in := stdin
	if len(rest) == 1 && rest[0] != "-" {
		f, err := os.Open(rest[0])
		if err != nil {
			fmt.Fprintf(stderr, "testhelper %s: %v\n", args[0], err)
			return 2
		}
		defer f.Close()
		in = f
	}
	objects, err := readObjects(in)
	if err != nil {
		fmt.Fprintf(stderr, "testhelper %s: %v\n", args[0], err)
		return 2
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	code := 0
	for _, obj := range objects {
		res, err := eval(obj)
		if err != nil {
			// As Argo CD does with a failing check: the health is Unknown and the error is the message.
			res.Status, res.Message, code = "Unknown", err.Error(), 1
		}
		res.Kind, res.Namespace, res.Name = identity(obj)
		if err := enc.Encode(res); err != nil {
			fmt.Fprintf(stderr, "testhelper %s: %v\n", args[0], err)
			return 2
		}
	}
	return code
}

// scriptFlag takes `--script PATH` (or `--script=PATH`) out of args and reads the file.
func scriptFlag(args []string) (string, []string, error) {
	var path string
	var rest []string
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--script" || a == "-script":
			if i+1 >= len(args) {
				return "", nil, fmt.Errorf("--script needs a file")
			}
			path = args[i+1]
			i++
		case len(a) > len("--script=") && a[:len("--script=")] == "--script=":
			path = a[len("--script="):]
		default:
			rest = append(rest, a)
		}
	}
	if path == "" {
		return "", nil, fmt.Errorf("--script is required")
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	return string(text), rest, nil
}

// readObjects decodes one JSON object; a List yields its items. Numbers become int64 when
// integral and float64 otherwise, as apimachinery's unstructured decoding does, so that
// kstatus's NestedInt64 and Argo CD's Lua conversion see what they see in a controller.
func readObjects(r io.Reader) ([]map[string]interface{}, error) {
	dec := json.NewDecoder(r)
	dec.UseNumber()
	var doc interface{}
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("input is not a JSON object: %w", err)
	}
	obj, ok := convertNumbers(doc).(map[string]interface{})
	if !ok {
		return nil, fmt.Errorf("input is not a JSON object")
	}
	items, isList := obj["items"].([]interface{})
	kind, _ := obj["kind"].(string)
	if !isList || len(kind) < 4 || kind[len(kind)-4:] != "List" {
		return []map[string]interface{}{obj}, nil
	}
	out := make([]map[string]interface{}, 0, len(items))
	for i, it := range items {
		m, ok := it.(map[string]interface{})
		if !ok {
			return nil, fmt.Errorf("items[%d] is not an object", i)
		}
		out = append(out, m)
	}
	return out, nil
}

func convertNumbers(v interface{}) interface{} {
	switch t := v.(type) {
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		if f, err := t.Float64(); err == nil {
			return f
		}
		return t.String()
	case map[string]interface{}:
		for k, x := range t {
			t[k] = convertNumbers(x)
		}
		return t
	case []interface{}:
		for i, x := range t {
			t[i] = convertNumbers(x)
		}
		return t
	default:
		return v
	}
}

func identity(obj map[string]interface{}) (kind, namespace, name string) {
	kind, _ = obj["kind"].(string)
	if meta, ok := obj["metadata"].(map[string]interface{}); ok {
		namespace, _ = meta["namespace"].(string)
		name, _ = meta["name"].(string)
	}
	return kind, namespace, name
}
