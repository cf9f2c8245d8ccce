// kstatus reads one Kubernetes object as JSON (a file named as the only argument, or stdin;
// e.g. the output of `kubectl get -o json`), computes its status with the reference
// implementation, sigs.k8s.io/cli-utils/pkg/kstatus/status.Compute, and prints the result as
// one JSON object: {"status": "...", "message": "...", "conditions": [...]}.
//
// The tests (tests/kstatus.rs) use it to check that kstatus reads ApplySets correctly.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

// output is what the program prints: kstatus's verdict on the object.
type output struct {
	Status     string             `json:"status"`
	Message    string             `json:"message"`
	Conditions []status.Condition `json:"conditions"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "kstatus:", err)
		os.Exit(1)
	}
}

func run() error {
	var in io.Reader = os.Stdin
	switch len(os.Args) {
	case 1:
	case 2:
		f, err := os.Open(os.Args[1])
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	default:
		return fmt.Errorf("usage: %s [object.json]", os.Args[0])
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	// Unstructured's own decoder keeps integers as int64, as kstatus expects (encoding/json
	// alone would give float64 and kstatus would reject metadata.generation).
	obj := &unstructured.Unstructured{}
	if err := obj.UnmarshalJSON(data); err != nil {
		return fmt.Errorf("reading the object: %w", err)
	}
	res, err := status.Compute(obj)
	if err != nil {
		return fmt.Errorf("computing the status: %w", err)
	}
	conditions := res.Conditions
	if conditions == nil {
		conditions = []status.Condition{}
	}
	return json.NewEncoder(os.Stdout).Encode(output{
		Status:     res.Status.String(),
		Message:    res.Message,
		Conditions: conditions,
	})
}
