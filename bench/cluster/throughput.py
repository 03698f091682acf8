#!/usr/bin/env python3
"""Scheduling throughput through a real kube-scheduler and API server.

Driven by bench/cluster/throughput.sh, which brings up the control plane
(tests/e2e/cluster.sh up --control-plane) and `gpuslice scheduler`. This program talks to
the API server only (standard library, HTTPS with the admin's client certificate):

  nodes    creates N Node objects as `gpuslice node --scheduler-decisions` would publish
           them (hami.io/node-nvidia-register in HAMi's JSON form, a `Reported <time>`
           handshake) with capacity/allocatable nvidia.com/gpu = cards x slots and a Ready
           condition. No kubelet is behind them: pods are bound, never started.
  run      creates P pods at once from several threads and watches (one watch, no
           polling) until every one has spec.nodeName; prints wall time from the first
           create to the last bind, pods/s, and per pod create->bound p50/p99. With
           --claim it also plays the node agents' part of the hand-off: a pod bound with
           hami.io/bind-phase `allocating` gets the merge patch the agent's Allocate would
           write (entry claimed, bind-phase success), so the extender's hand-off gate sees
           pods leave `pending` as on a real cluster. Then checks that no card was handed
           more than its memory, cores or slots (hami.io/vgpu-devices-allocated summed per
           card against the inventories made by `nodes`).

Numbers are printed, never asserted: the exit status is non-zero only when pods were left
unbound or a card is over capacity.
"""

import argparse
import http.client
import json
import os
import queue
import ssl
import sys
import threading
import time
import urllib.request

# Card models the nodes are made of, in turn by node (a node's 8 cards are alike, as on
# real machines): HAMi's "type" is the vendor, a dash and NVML's name.
CARDS = [("NVIDIA-NVIDIA A10", 24576), ("NVIDIA-NVIDIA L40S", 49152), ("NVIDIA-NVIDIA H100 80GB HBM3", 81920)]


class Api:
    """One keep-alive HTTPS connection per thread to the API server."""

    def __init__(self, d, port):
        self.host, self.port = "127.0.0.1", port
        self.ctx = ssl.create_default_context(cafile=f"{d}/pki/ca.crt")
        self.ctx.load_cert_chain(f"{d}/pki/admin.crt", f"{d}/pki/admin.key")
        self.local = threading.local()

    def conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=60)
            self.local.c = c
        return c

    def call(self, method, path, body=None, content_type="application/json"):
        data = json.dumps(body).encode() if body is not None and not isinstance(body, bytes) else body
        for attempt in range(3):
            c = self.conn()
            try:
                c.request(method, path, body=data, headers={"Content-Type": content_type} if data else {})
                r = c.getresponse()
                payload = r.read()
                return r.status, payload
            except (http.client.HTTPException, OSError):
                c.close()
                self.local.c = None
                if attempt == 2:
                    raise
        raise RuntimeError("unreachable")

    def stream(self, path):
        c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=3600)
        c.request("GET", path)
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"watch {path}: HTTP {r.status} {r.read()[:300]!r}")
        return c, r


def parallel(items, fn, threads):
    """fn(item) on `threads` threads; returns the first exception raised, if any."""
    q = queue.Queue()
    for it in items:
        q.put(it)
    errors = []

    def work():
        while True:
            try:
                it = q.get_nowait()
            except queue.Empty:
                return
            try:
                fn(it)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def card_uuid(node, card):
    return f"GPU-{node:08x}-0000-4000-8000-{card:012x}"


def node_object(i, cards, slots, now):
    model, mib = CARDS[i % len(CARDS)]
    devices = []
    for c in range(cards):
        # Go's encoding/json with omitempty, as hami_format.cc's EncodeNodeRegister writes
        # it (index 0 and numa 0 left out).
        d = {"id": card_uuid(i, c)}
        if c:
            d["index"] = c
        d.update({"count": slots, "devmem": mib, "devcore": 100, "type": model, "mode": "hami-core", "health": True})
        devices.append(d)
    name = f"gpu-node-{i:05d}"
    res = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(cards * slots)}
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "gpuslice.io/bench": "1"},
            "annotations": {
                "hami.io/node-nvidia-register": json.dumps(devices, separators=(",", ":")),
                "hami.io/node-handshake": "Reported " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)),
            },
        },
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "no kubelet: bench",
                            "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}],
            "addresses": [{"type": "Hostname", "address": name}],
        },
    }


def cmd_nodes(api, a):
    now = time.time()
    t0 = time.monotonic()

    def make(i):
        n = node_object(i, a.cards, a.slots, now)
        st, body = api.call("POST", "/api/v1/nodes", n)
        if st == 409:
            return
        if st != 201:
            raise RuntimeError(f"creating node {n['metadata']['name']}: HTTP {st} {body[:300]!r}")
        got = json.loads(body)
        # The API server keeps a new Node's status on create; should a version not, the
        # status is written separately, so kube-scheduler's fit sees the cards either way.
        if "nvidia.com/gpu" not in got.get("status", {}).get("capacity", {}):
            st, body = api.call("PATCH", f"/api/v1/nodes/{n['metadata']['name']}/status",
                                {"status": n["status"]}, "application/merge-patch+json")
            if st != 200:
                raise RuntimeError(f"node status: HTTP {st} {body[:300]!r}")

    parallel(range(a.count), make, a.threads)
    took = time.monotonic() - t0
    print(f"nodes: {a.count} Node objects ({a.cards} cards x {a.slots} slots each; "
          f"{', '.join(f'{m[7:]} {mib // 1024} GiB' for m, mib in CARDS)} in turn) "
          f"created in {took:.1f} s ({a.count / took:.0f}/s, {a.threads} threads)")


def pod_object(run, i, scheduler, shape):
    limits = {"nvidia.com/gpu": 1}
    if shape:
        mem, cores = shape
        limits.update({"nvidia.com/gpumem": mem, "nvidia.com/gpucores": cores})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{run}-{i:05d}", "labels": {"bench": run}},
        "spec": {
            "schedulerName": scheduler,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "gpuslice-e2e:1", "imagePullPolicy": "Never",
                            "command": ["/bin/sh", "-c", "sleep 3600"], "resources": {"limits": limits}}],
        },
    }


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100.0 * len(xs) + 0.5)) - 1))
    return xs[k]


def scrape(url):
    """Prometheus text -> {name{labels}: value}; empty when the endpoint does not answer."""
    try:
        text = urllib.request.urlopen(url, timeout=10).read().decode()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        try:
            out[key] = float(value)
        except ValueError:
            pass
    return out


def sum_matching(m, prefix, must=()):
    """The sum of a metric's samples over every label set (name exactly, or name{...})."""
    return sum(v for k, v in m.items() if (k == prefix or k.startswith(prefix + "{")) and all(x in k for x in must))


def delta_mean(before, after, name, must=()):
    """Mean of a histogram over the run: (sum after - before) / (count after - before)."""
    s = sum_matching(after, name + "_sum", must) - sum_matching(before, name + "_sum", must)
    n = sum_matching(after, name + "_count", must) - sum_matching(before, name + "_count", must)
    return (s / n, int(n)) if n > 0 else (float("nan"), 0)


def cpu_seconds(d):
    """CPU time (user + system) so far of each process the cluster recorded in D/pids,
    and of this program: on a shared machine, where a run's CPU goes."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    try:
        names = [f[:-4] for f in os.listdir(f"{d}/pids") if f.endswith(".pid")]
    except OSError:
        names = []
    for name in names:
        try:
            pid = open(f"{d}/pids/{name}.pid").read().strip()
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            out[name] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            pass
    t = os.times()
    out["bench client (python)"] = t.user + t.system
    return out


def cmd_run(api, a):
    shapes = []
    for s in a.shapes.split(",") if a.shapes else []:
        mem, cores = s.split(":")
        shapes.append((int(mem), int(cores)))
    created, bound, nodes_of, allocated = {}, {}, {}, {}
    claims = queue.Queue()
    claimed = set()
    lock = threading.Lock()
    done = threading.Event()

    # One watch from the list's resourceVersion: every bind is seen as it happens.
    st, body = api.call("GET", f"/api/v1/namespaces/default/pods?labelSelector=bench%3D{a.run}&limit=1")
    rv = json.loads(body)["metadata"]["resourceVersion"]
    conn, resp = api.stream(f"/api/v1/namespaces/default/pods?watch=1&labelSelector=bench%3D{a.run}"
                            f"&resourceVersion={rv}&allowWatchBookmarks=false")

    def watch():
        while not done.is_set():
            line = resp.readline()
            if not line:
                break
            t = time.monotonic()
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            pod = ev.get("object", {})
            name = pod.get("metadata", {}).get("name")
            node = pod.get("spec", {}).get("nodeName")
            ann = pod.get("metadata", {}).get("annotations") or {}
            with lock:
                if node and name not in bound:
                    bound[name] = t
                    nodes_of[name] = node
                    if len(bound) >= a.pods:
                        done.set()
                if node and ann.get("hami.io/bind-phase") == "success" and name not in allocated:
                    allocated[name] = t
                if (a.claim and node and ann.get("hami.io/bind-phase") == "allocating" and name not in claimed):
                    claimed.add(name)
                    claims.put(name)

    def claimer():
        # What the node agent's Allocate writes for a one-container pod: the entry taken
        # out of to-allocate, bind-phase success (scheduler_decisions.cc, handoff.cc).
        while True:
            name = claims.get()
            if name is None:
                return
            patch = {"metadata": {"annotations": {"hami.io/vgpu-devices-to-allocate": ";",
                                                  "hami.io/bind-phase": "success"}}}
            api.call("PATCH", f"/api/v1/namespaces/default/pods/{name}", patch, "application/merge-patch+json")

    wt = threading.Thread(target=watch, daemon=True)
    wt.start()
    cts = [threading.Thread(target=claimer, daemon=True) for _ in range(a.claim_threads if a.claim else 0)]
    for t in cts:
        t.start()

    cpu_before = cpu_seconds(a.dir)
    ks_before = scrape(a.scheduler_metrics) if a.scheduler_metrics else {}
    ext_before = scrape(a.extender_metrics) if a.extender_metrics else {}
    create_err = []

    def make(i):
        p = pod_object(a.run, i, a.scheduler, shapes[i % len(shapes)] if shapes else None)
        t = time.monotonic()
        st, body = api.call("POST", "/api/v1/namespaces/default/pods", p)
        if st != 201:
            create_err.append(f"{p['metadata']['name']}: HTTP {st} {body[:300]!r}")
            raise RuntimeError(create_err[-1])
        with lock:
            created[p["metadata"]["name"]] = t

    t0 = time.monotonic()
    parallel(range(a.pods), make, a.threads)
    t_created = time.monotonic()
    done.wait(a.timeout)
    t_end = time.monotonic()
    for _ in cts:
        claims.put(None)
    cpu_after = cpu_seconds(a.dir)
    ks_after = scrape(a.scheduler_metrics) if a.scheduler_metrics else {}
    ext_after = scrape(a.extender_metrics) if a.extender_metrics else {}
    conn.close()

    with lock:
        lat = [bound[n] - created[n] for n in bound if n in created]
        claim_lag = [allocated[n] - bound[n] for n in allocated if n in bound]
        last_bind = max(bound.values()) if bound else t_end
        nb = len(bound)
    wall = last_bind - t0
    label = a.label or a.run
    res = {
        "label": label, "pods": a.pods, "bound": nb, "create_s": t_created - t0, "wall_s": wall,
        "rate": nb / wall if wall > 0 else 0, "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3,
        "max_ms": max(lat) * 1e3 if lat else float("nan"), "nodes_used": len(set(nodes_of.values())),
        # bound -> bind-phase success as the watch saw them: how soon the stand-in for the
        # node agents claimed, which is what a bind waiting in the hand-off gate waits for.
        "claim_p50_ms": percentile(claim_lag, 50) * 1e3, "claim_p99_ms": percentile(claim_lag, 99) * 1e3,
    }
    # kube-scheduler's own histograms over the run: where a pod's time goes.
    for key, name in [("algo_ms", "scheduler_scheduling_algorithm_duration_seconds"),
                      ("binding_ms", "scheduler_binding_duration_seconds"),
                      ("e2e_ms", "scheduler_e2e_scheduling_duration_seconds")]:
        m, _ = delta_mean(ks_before, ks_after, name)
        res[key] = m * 1e3
    for ep in ("Filter", "Score", "Bind"):
        m, _ = delta_mean(ks_before, ks_after, "scheduler_framework_extension_point_duration_seconds",
                          [f'extension_point="{ep}"'])
        res[f"fw_{ep.lower()}_ms"] = m * 1e3
    res["cpu_s"] = {k: round(cpu_after[k] - v, 1) for k, v in cpu_before.items() if k in cpu_after}
    res["cpu_window_s"] = round(t_end - t0, 1)
    attempts = {}
    for k in ("scheduled", "unschedulable", "error"):
        attempts[k] = int(sum_matching(ks_after, "scheduler_schedule_attempts_total", [f'result="{k}"']) -
                          sum_matching(ks_before, "scheduler_schedule_attempts_total", [f'result="{k}"']))
    res["attempts"] = attempts
    if ext_after:
        res["extender"] = {k.replace("gpuslice_scheduler_", ""): ext_after.get(k, 0) - ext_before.get(k, 0)
                           for k in ("gpuslice_scheduler_binds_total", "gpuslice_scheduler_bind_failures_total",
                                     "gpuslice_scheduler_handoff_waits_total",
                                     "gpuslice_scheduler_handoff_refusals_total",
                                     "gpuslice_scheduler_handoff_wait_seconds_total")}
    print(json.dumps(res))
    if a.result:
        with open(a.result, "a") as f:
            f.write(json.dumps(res) + "\n")
    return 0 if nb == a.pods else 1


def cmd_check(api, a):
    """No card over its memory, cores or slots, from the decisions written on the pods."""
    cap = {}
    for i in range(a.nodes):
        _, mib = CARDS[i % len(CARDS)]
        for c in range(a.cards):
            cap[card_uuid(i, c)] = (f"gpu-node-{i:05d}", mib)
    used = {}
    cont = ""
    pods = wrong_node = 0
    while True:
        st, body = api.call("GET", f"/api/v1/namespaces/default/pods?labelSelector=bench%3D{a.run}&limit=500"
                                   + (f"&continue={cont}" if cont else ""))
        doc = json.loads(body)
        for p in doc["items"]:
            ann = p["metadata"].get("annotations") or {}
            alloc = ann.get("hami.io/vgpu-devices-allocated", "")
            if not alloc:
                continue
            pods += 1
            node = p["spec"].get("nodeName", "")
            if ann.get("hami.io/vgpu-node") != node:
                wrong_node += 1
            for ctr in alloc.split(";"):
                for e in ctr.split(":"):
                    f = e.split(",")
                    if len(f) < 4:
                        continue
                    u = used.setdefault(f[0], [0, 0, 0, set()])
                    u[0] += int(f[2])
                    u[1] += int(f[3])
                    u[2] += 1
                    u[3].add(node)
        cont = doc["metadata"].get("continue")
        if not cont:
            break
    over = []
    for uuid, (mem, cores, n, on) in used.items():
        node, mib = cap.get(uuid, ("?", 0))
        if mem > mib or cores > 100 or n > a.slots or on != {node}:
            over.append(f"{uuid} ({node}): {mem}/{mib} MiB, {cores} % cores, {n}/{a.slots} pods, bound to {sorted(on)}")
    busiest = max(used.items(), key=lambda kv: kv[1][0], default=None)
    print(f"check: {pods} pods with decisions on {len(used)} cards; "
          f"{len(over)} card(s) over memory, cores or slots; {wrong_node} pod(s) whose hami.io/vgpu-node is not "
          f"spec.nodeName" + (f"; fullest card {busiest[0]}: {busiest[1][0]} MiB, {busiest[1][1]} % cores, "
                               f"{busiest[1][2]} pods" if busiest else ""))
    for o in over[:20]:
        print("  over: " + o)
    return 0 if not over and not wrong_node else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("GPUSLICE_E2E_DIR", "/tmp/gpuslice-e2e"))
    ap.add_argument("--api-port", type=int, default=26443)
    sub = ap.add_subparsers(dest="cmd", required=True)
    n = sub.add_parser("nodes")
    n.add_argument("--count", type=int, default=5000)
    n.add_argument("--cards", type=int, default=8)
    n.add_argument("--slots", type=int, default=10)
    n.add_argument("--threads", type=int, default=16)
    r = sub.add_parser("run")
    r.add_argument("--run", required=True, help="label value bench=RUN, and the pods' name prefix")
    r.add_argument("--label", default="")
    r.add_argument("--pods", type=int, default=1000)
    r.add_argument("--scheduler", required=True)
    r.add_argument("--shapes", default="", help="MIB:CORES,... (empty: plain nvidia.com/gpu: 1)")
    r.add_argument("--threads", type=int, default=16)
    r.add_argument("--claim", action="store_true")
    r.add_argument("--claim-threads", type=int, default=4)
    r.add_argument("--timeout", type=float, default=600)
    r.add_argument("--scheduler-metrics", default="")
    r.add_argument("--extender-metrics", default="")
    r.add_argument("--result", default="")
    c = sub.add_parser("check")
    c.add_argument("--run", required=True)
    c.add_argument("--nodes", type=int, default=5000)
    c.add_argument("--cards", type=int, default=8)
    c.add_argument("--slots", type=int, default=10)
    a = ap.parse_args()
    api = Api(a.dir, a.api_port)
    return {"nodes": cmd_nodes, "run": cmd_run, "check": cmd_check}[a.cmd](api, a) or 0


if __name__ == "__main__":
    sys.exit(main())
