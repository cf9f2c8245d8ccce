// ssa-ceiling: the yardstick of the operator's writes. It sends, without the operator, every
// write the operator sends for ApplySets of Flux's four objects (docs/benchmarks.md, "The
// ceiling"), timed phase by phase, with the API server's CPU seconds read from /proc.
// Against a local control plane only (a loopback address):
//
//	ssa-ceiling https://127.0.0.1:PORT TOKEN APISERVER_PID NAMESPACE N [PHASES]
//
// Phases: create (the user's create of each set), parent-ssa (the parent's labels,
// annotations and finalizer), members (four member applies per set), status-ssa (the status
// the operator writes), event (the operator's event about the set); parent-merge and
// status-merge are experiments. The settings below are the yardstick: `make bench` reports
// them and a sha256 of this file, so a change to them is a change of the yardstick. PHASES
// other than the default is an experiment, marked "fixed": false in the output. The
// namespace must exist, and a phase needs the sets the create phase made.
//
// Output: one human line per phase, then one JSON document on the last line.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The yardstick's settings.
const (
	// InFlight is how many requests are sent at once.
	InFlight = 32
	// Phases are the default phases, in their order.
	Phases = "create,parent-ssa,members,status-ssa,event"
	// HTTP2 is whether requests go over HTTP/2 (the operator's client speaks HTTP/1.1; the API
	// server's CPU per write measured the same over both, within 3 %).
	HTTP2 = true
	// FieldValidation is the parent's and the status's applies' fieldValidation (the
	// operator's: it builds those bodies itself).
	FieldValidation = "Ignore"
)

var server, token string
var client *http.Client
var failed atomic.Int64

func do(method, path, ctype string, body []byte) int {
	req, _ := http.NewRequest(method, server+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		failed.Add(1)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		fmt.Fprintln(os.Stderr, method, path, resp.StatusCode)
		failed.Add(1)
	}
	return resp.StatusCode
}

func cpu(pid string) float64 {
	b, _ := os.ReadFile("/proc/" + pid + "/stat")
	f := strings.Fields(string(b))
	u, _ := strconv.ParseFloat(f[13], 64)
	s, _ := strconv.ParseFloat(f[14], 64)
	return (u + s) / 100
}

func members(name string) []any {
	var ms []any
	json.Unmarshal([]byte(strings.ReplaceAll(`[{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "NAME"}},
{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "NAME"},"spec": {"clusterIP": "None", "selector": {"app": "NAME"}, "ports": [{"name": "http", "port": 80}]}},
{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "NAME"},"spec": {"replicas": 0, "selector": {"matchLabels": {"app": "NAME"}},"template": {"metadata": {"labels": {"app": "NAME"}}, "spec": {"serviceAccountName": "NAME","containers": [{"name": "app", "image": "registry.example/app:1", "ports": [{"containerPort": 80}]}]}}}},
{"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "NAME"},"spec": {"rules": [{"host": "NAME.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix","backend": {"service": {"name": "NAME", "port": {"number": 80}}}}]}}]}}]`, "NAME", name)), &ms)
	return ms
}

func run(n int, f func(i int)) {
	var wg sync.WaitGroup
	ch := make(chan int)
	for w := 0; w < InFlight; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				f(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		ch <- i
	}
	close(ch)
	wg.Wait()
}

// phaseResult is one phase's figures.
type phaseResult struct {
	Phase        string  `json:"phase"`
	Wall         float64 `json:"wall_seconds"`
	APIServerCPU float64 `json:"apiserver_cpu_seconds"`
}

func main() {
	if len(os.Args) < 6 {
		fmt.Fprintln(os.Stderr, "usage: ssa-ceiling SERVER TOKEN APISERVER_PID NAMESPACE N [PHASES]")
		os.Exit(2)
	}
	server, token = os.Args[1], os.Args[2]
	if u, err := url.Parse(server); err != nil || !isLoopback(u.Hostname()) {
		fmt.Fprintln(os.Stderr, "ssa-ceiling: the API server must be on a loopback address (a local control plane)")
		os.Exit(2)
	}
	pid := os.Args[3]
	ns := os.Args[4]
	n, err := strconv.Atoi(os.Args[5])
	if err != nil {
		fmt.Fprintln(os.Stderr, "ssa-ceiling: N:", err)
		os.Exit(2)
	}
	phases := Phases
	if len(os.Args) > 6 {
		phases = os.Args[6]
	}
	client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: HTTP2, MaxIdleConnsPerHost: 64}}
	var results []phaseResult
	wall, total := 0.0, 0.0
	for _, ph := range strings.Split(phases, ",") {
		c0 := cpu(pid)
		t0 := time.Now()
		if !phase(ph, ns, n) {
			fmt.Fprintln(os.Stderr, "ssa-ceiling: unknown phase", ph)
			os.Exit(2)
		}
		r := phaseResult{ph, time.Since(t0).Seconds(), cpu(pid) - c0}
		results = append(results, r)
		wall += r.Wall
		total += r.APIServerCPU
		fmt.Printf("%-14s n=%d wall=%.1fs apiserver_cpu=%.1fs per=%.2fms\n", ph, n, r.Wall, r.APIServerCPU, r.APIServerCPU*1000/float64(n))
	}
	fmt.Printf("%-14s n=%d wall=%.1fs apiserver_cpu=%.1fs\n", "TOTAL", n, wall, total)
	doc, _ := json.Marshal(map[string]any{
		"settings": map[string]any{"in_flight": InFlight, "phases": phases, "http2": HTTP2,
			"field_validation": FieldValidation, "fixed": phases == Phases},
		"sets": n, "phases": results, "wall_seconds": wall, "apiserver_cpu_seconds": total,
		"failed_requests": failed.Load()})
	fmt.Println(string(doc))
	if failed.Load() > 0 {
		os.Exit(1)
	}
}

// phase sends phase ph's requests for n sets in ns; false for an unknown phase.
func phase(ph, ns string, n int) bool {
	sets := "/apis/applyset.dev/v1alpha1/namespaces/" + ns + "/applysets"
	id := "applyset-cXvd15Qi0cG0k6cEnPTLVVr-JMJDFl1WHcBWhFyYa8I-v1"
	switch ph {
	case "create":
		run(n, func(i int) {
			name := fmt.Sprintf("set-%05d", i)
			b, _ := json.Marshal(map[string]any{"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet", "metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"manifests": members(fmt.Sprintf("s%05d-app", i))}})
			do("POST", sets, "application/json", b)
		})
	case "parent-ssa", "parent-merge":
		run(n, func(i int) {
			name := fmt.Sprintf("set-%05d", i)
			meta := map[string]any{"name": name, "labels": map[string]string{"applyset.kubernetes.io/id": id}, "annotations": map[string]string{"applyset.kubernetes.io/tooling": "applyset-operator/v0.1.0", "applyset.kubernetes.io/contains-group-kinds": "Deployment.apps,Ingress.networking.k8s.io,Service,ServiceAccount", "applyset.kubernetes.io/additional-namespaces": ""}, "finalizers": []string{"applyset.dev/cleanup"}}
			if ph == "parent-ssa" {
				b, _ := json.Marshal(map[string]any{"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet", "metadata": meta})
				do("PATCH", sets+"/"+name+"?fieldManager=applyset.dev%2Fparent&force=true&fieldValidation="+FieldValidation, "application/apply-patch+yaml", b)
			} else {
				b, _ := json.Marshal(map[string]any{"metadata": meta})
				do("PATCH", sets+"/"+name+"?fieldManager=applyset.dev%2Fparent&fieldValidation="+FieldValidation, "application/merge-patch+json", b)
			}
		})
	case "status-ssa", "status-merge":
		run(n, func(i int) {
			name := fmt.Sprintf("set-%05d", i)
			m := func(g, k string) map[string]string {
				return map[string]string{"group": g, "kind": k, "name": fmt.Sprintf("s%05d-app", i), "namespace": ns}
			}
			st := map[string]any{"applySetID": id, "conditions": []any{map[string]any{"lastTransitionTime": "2026-11-25T21:38:49Z", "message": "applied 4 members (4 created, 0 configured, 0 unchanged), pruned 0", "observedGeneration": 1, "reason": "ReconciliationSucceeded", "status": "True", "type": "Ready"}},
				"lastAppliedRevision": "sha256:d4c731674440c190951be56e79fc9b24bfca4ec9e075258b7adc60416ca34d1f", "lastAttemptedRevision": "sha256:d4c731674440c190951be56e79fc9b24bfca4ec9e075258b7adc60416ca34d1f",
				"members": []any{m("", "Service"), m("", "ServiceAccount"), m("apps", "Deployment"), m("networking.k8s.io", "Ingress")}, "observedGeneration": 1,
				"summary": map[string]int{"configured": 0, "conflicts": 0, "created": 4, "failed": 0, "members": 4, "pruned": 0, "retained": 0, "unchanged": 0}}
			if ph == "status-ssa" {
				b, _ := json.Marshal(map[string]any{"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet", "status": st})
				do("PATCH", sets+"/"+name+"/status?fieldManager=applyset.dev%2Fstatus&force=true&fieldValidation="+FieldValidation, "application/apply-patch+yaml", b)
			} else {
				b, _ := json.Marshal(map[string]any{"status": st})
				do("PATCH", sets+"/"+name+"/status?fieldManager=applyset.dev%2Fstatus&fieldValidation="+FieldValidation, "application/merge-patch+json", b)
			}
		})
	case "members":
		run(n, func(i int) {
			for _, m := range members(fmt.Sprintf("s%05d-app", i)) {
				mm := m.(map[string]any)
				md := mm["metadata"].(map[string]any)
				md["labels"] = map[string]string{"applyset.kubernetes.io/part-of": id}
				b, _ := json.Marshal(mm)
				var path string
				name := md["name"].(string)
				switch mm["kind"] {
				case "ServiceAccount":
					path = "/api/v1/namespaces/" + ns + "/serviceaccounts/" + name
				case "Service":
					path = "/api/v1/namespaces/" + ns + "/services/" + name
				case "Deployment":
					path = "/apis/apps/v1/namespaces/" + ns + "/deployments/" + name
				case "Ingress":
					path = "/apis/networking.k8s.io/v1/namespaces/" + ns + "/ingresses/" + name
				}
				do("PATCH", path+"?fieldManager=applyset.dev%2Fns%2Fx", "application/apply-patch+yaml", b)
			}
		})
	case "event":
		run(n, func(i int) {
			name := fmt.Sprintf("set-%05d", i)
			app := fmt.Sprintf("s%05d-app", i)
			now := time.Now().UTC()
			b, _ := json.Marshal(map[string]any{"apiVersion": "events.k8s.io/v1", "kind": "Event",
				"metadata":            map[string]any{"name": fmt.Sprintf("%s.%x", name, now.UnixNano()), "namespace": ns},
				"action":              "Reconcile",
				"reason":              "ReconciliationSucceeded",
				"note":                "applied 4 members (4 created, 0 configured, 0 unchanged), pruned 0; changed: created Service/" + app + ", ServiceAccount/" + app + ", Deployment.apps/" + app + ", Ingress.networking.k8s.io/" + app,
				"type":                "Normal",
				"eventTime":           now.Format("2006-01-02T15:04:05.000000Z07:00"),
				"regarding":           map[string]any{"apiVersion": "applyset.dev/v1alpha1", "kind": "ApplySet", "name": name, "namespace": ns},
				"reportingController": "applyset-operator",
				"reportingInstance":   "applyset-operator",
			})
			do("POST", "/apis/events.k8s.io/v1/namespaces/"+ns+"/events", "application/json", b)
		})
	default:
		return false
	}
	return true
}

// isLoopback reports whether host is a loopback IP address.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
