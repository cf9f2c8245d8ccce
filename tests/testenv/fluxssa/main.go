// Command fluxssa prints what fluxcd/pkg/ssa, as kustomize-controller configures it, decides
// for each case read as a JSON array on stdin, so that tests/flux_ssa.rs can compare the
// operator's own rules (src/applyset/controls.rs, src/applyset/field_managers.rs) with Flux's.
//
// A case is {"desired": META, "live": META or null, "owner": NAME, "managedFields": [...]},
// META being {"labels": {...}, "annotations": {...}}. Its answer is
// {"skip": "Exclusion"|"IfNotPresent"|"", "force": bool, "override": bool,
// "keepOnPrune": bool, "managedFields": [...] or null}:
//   - skip: ssa's shouldSkipApply with kustomize-controller's ExclusionSelector (desired or
//     live) and IfNotPresentSelector (desired, when live exists);
//   - force: shouldForceApply's ForceSelector on desired or live (after an immutable error);
//   - override: cleanupMetadata runs (its Exclusions, ssa: Merge, on neither object);
//   - keepOnPrune: Delete's Exclusions (kustomize-controller's deleteObjects) on the live object;
//   - managedFields: the value of the patch PatchReplaceFieldsManagers computes with
//     kustomize-controller's FieldManagers (the owner, matched exactly, in place of
//     kustomize-controller), or null when it computes none.
//
// Every selector is kustomize-controller's map, and the same map under the operator's own
// prefix applyset.dev/ (the operator reads both; Flux's AnyInMetadata is applied to each).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/utils"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const fluxPrefix = "kustomize.toolkit.fluxcd.io/"

// kustomize-controller's selectors (internal/controller/kustomization_controller.go).
var (
	exclusion    = map[string]string{fluxPrefix + "reconcile": "disabled", fluxPrefix + "ssa": "Ignore"}
	ifNotPresent = map[string]string{fluxPrefix + "ssa": "IfNotPresent"}
	force        = map[string]string{fluxPrefix + "force": "enabled"}
	cleanupExcl  = map[string]string{fluxPrefix + "ssa": "Merge"}
	deleteExcl   = map[string]string{fluxPrefix + "prune": "disabled", fluxPrefix + "reconcile": "disabled", fluxPrefix + "ssa": "Ignore"}
)

type meta struct {
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type input struct {
	Desired       meta                        `json:"desired"`
	Live          *meta                       `json:"live"`
	Owner         string                      `json:"owner"`
	ManagedFields []metav1.ManagedFieldsEntry `json:"managedFields"`
}

type answer struct {
	Skip          string                      `json:"skip"`
	Force         bool                        `json:"force"`
	Override      bool                        `json:"override"`
	KeepOnPrune   bool                        `json:"keepOnPrune"`
	ManagedFields []metav1.ManagedFieldsEntry `json:"managedFields"`
}

func object(m meta) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMap"}}
	u.SetName("x")
	u.SetLabels(m.Labels)
	u.SetAnnotations(m.Annotations)
	return u
}

// ours is the selector under the operator's prefix.
func ours(selector map[string]string) map[string]string {
	out := make(map[string]string, len(selector))
	for k, v := range selector {
		out["applyset.dev/"+strings.TrimPrefix(k, fluxPrefix)] = v
	}
	return out
}

// anyIn is AnyInMetadata under both prefixes.
func anyIn(u *unstructured.Unstructured, selector map[string]string) bool {
	return u != nil && (utils.AnyInMetadata(u, selector) || utils.AnyInMetadata(u, ours(selector)))
}

// fieldManagers is kustomize-controller's Cleanup.FieldManagers, the owner in place of its
// name, matched exactly (each set has a manager of its own; a prefix would match another set's).
func fieldManagers(owner string) []ssa.FieldManager {
	return []ssa.FieldManager{
		{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationApply},
		{Name: "kubectl", OperationType: metav1.ManagedFieldsOperationUpdate},
		{Name: "before-first-apply", OperationType: metav1.ManagedFieldsOperationUpdate},
		{Name: owner, ExactMatch: true, OperationType: metav1.ManagedFieldsOperationUpdate},
	}
}

func decide(in input) (answer, error) {
	desired := object(in.Desired)
	var live *unstructured.Unstructured
	if in.Live != nil {
		live = object(*in.Live)
	}
	var a answer
	switch {
	case anyIn(desired, exclusion) || anyIn(live, exclusion):
		a.Skip = "Exclusion"
	case anyIn(desired, ifNotPresent) && live != nil:
		a.Skip = "IfNotPresent"
	}
	a.Force = anyIn(desired, force) || anyIn(live, force)
	a.Override = !(anyIn(desired, cleanupExcl) || anyIn(live, cleanupExcl))
	a.KeepOnPrune = anyIn(live, deleteExcl)
	if in.ManagedFields != nil {
		u := object(meta{})
		u.SetManagedFields(in.ManagedFields)
		patches, err := ssa.PatchReplaceFieldsManagers(u, fieldManagers(in.Owner), in.Owner)
		if err != nil {
			return a, err
		}
		for _, p := range patches {
			a.ManagedFields = p.Value
		}
	}
	return a, nil
}

func main() {
	var cases []input
	if err := json.NewDecoder(os.Stdin).Decode(&cases); err != nil {
		fmt.Fprintln(os.Stderr, "fluxssa: reading the cases:", err)
		os.Exit(2)
	}
	answers := make([]answer, 0, len(cases))
	for i, c := range cases {
		a, err := decide(c)
		if err != nil {
			fmt.Fprintf(os.Stderr, "fluxssa: case %d: %v\n", i, err)
			os.Exit(1)
		}
		answers = append(answers, a)
	}
	if err := json.NewEncoder(os.Stdout).Encode(answers); err != nil {
		fmt.Fprintln(os.Stderr, "fluxssa: writing the answers:", err)
		os.Exit(2)
	}
}
