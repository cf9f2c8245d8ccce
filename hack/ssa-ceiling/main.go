// ssa-ceiling: the API server's cost of the writes an ApplySet of Flux's four objects needs,
// sent without the operator: 32 in flight, no watches, each kind of request in a phase of
// its own, timed, with the API server's CPU seconds read from /proc (docs/benchmarks.md,
// "Where the time goes at 10,000 × 4"). Against a local control plane only (make cluster-up):
//
//	go run . https://127.0.0.1:PORT TOKEN APISERVER_PID NAMESPACE N create,parent-ssa,members,status-ssa
//
// Phases: create (the user's create of each set), parent-ssa / parent-merge (the parent's
// labels, annotations and finalizer), members (four member applies per set), status-ssa /
// status-merge (the status the operator writes). FV=Ignore adds fieldValidation=Ignore to
// the patches. The namespace must exist, and a phase needs the sets the create phase made.
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
	"time"
)

var server, token string
var client *http.Client

func do(method, path, ctype string, body []byte) int {
	if fv := os.Getenv("FV"); fv != "" && method == "PATCH" {
		path += "&fieldValidation=" + fv
	}
	req, _ := http.NewRequest(method, server+path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode >= 300 {
		fmt.Fprintln(os.Stderr, method, path, resp.StatusCode)
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
	for w := 0; w < 32; w++ {
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

func main() {
	server, token = os.Args[1], os.Args[2]
	if u, err := url.Parse(server); err != nil || !isLoopback(u.Hostname()) {
		fmt.Fprintln(os.Stderr, "ssa-ceiling: the API server must be on a loopback address (a local control plane)")
		os.Exit(2)
	}
	pid := os.Args[3]
	ns := os.Args[4]
	n, _ := strconv.Atoi(os.Args[5])
	phases := strings.Split(os.Args[6], ",")
	client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 64}}
	sets := "/apis/applyset.dev/v1alpha1/namespaces/" + ns + "/applysets"
	id := "applyset-cXvd15Qi0cG0k6cEnPTLVVr-JMJDFl1WHcBWhFyYa8I-v1"
	tot0 := cpu(pid)
	start := time.Now()
	defer func() {
		fmt.Printf("%-14s n=%d wall=%.1fs apiserver_cpu=%.1fs\n", "TOTAL", n, time.Since(start).Seconds(), cpu(pid)-tot0)
	}()
	for _, ph := range phases {
		c0 := cpu(pid)
		t0 := time.Now()
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
					do("PATCH", sets+"/"+name+"?fieldManager=applyset.dev%2Fparent&force=true", "application/apply-patch+yaml", b)
				} else {
					b, _ := json.Marshal(map[string]any{"metadata": meta})
					do("PATCH", sets+"/"+name+"?fieldManager=applyset.dev%2Fparent", "application/merge-patch+json", b)
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
					do("PATCH", sets+"/"+name+"/status?fieldManager=applyset.dev%2Fstatus&force=true", "application/apply-patch+yaml", b)
				} else {
					b, _ := json.Marshal(map[string]any{"status": st})
					do("PATCH", sets+"/"+name+"/status?fieldManager=applyset.dev%2Fstatus", "application/merge-patch+json", b)
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
		}
		fmt.Printf("%-14s n=%d wall=%.1fs apiserver_cpu=%.1fs per=%.2fms\n", ph, n, time.Since(t0).Seconds(), cpu(pid)-c0, (cpu(pid)-c0)*1000/float64(n))
	}
}

// isLoopback reports whether host is a loopback IP address.
func isLoopback(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
