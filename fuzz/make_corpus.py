#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ from realistic inputs (the formats in
docs/ and src/, and the upstream specifications they follow). Run again after changing a seed; the files are
checked in, so `make fuzz` does not need this."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SEP = "\n----\n"


def pod(name="train", limits=None, annotations=None, init=None, node=None, scheduler="gpuslice-scheduler"):
    limits = limits if limits is not None else {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000",
                                                "nvidia.com/gpucores": "30"}
    p = {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": name, "namespace": "default", "uid": "uid-" + name, "resourceVersion": "1234",
                      "annotations": annotations or {}},
         "spec": {"schedulerName": scheduler,
                  "containers": [{"name": "c", "image": "cuda:12", "resources": {"limits": limits}}]},
         "status": {"phase": "Pending"}}
    if init:
        p["spec"]["initContainers"] = init
    if node:
        p["spec"]["nodeName"] = node
    return p


def dumps(x):
    return json.dumps(x, separators=(",", ":"))


ALLOCATING = {"hami.io/vgpu-node": "node-a", "hami.io/vgpu-time": "1790000000",
              "hami.io/bind-time": "1790000000", "hami.io/bind-phase": "allocating",
              "hami.io/vgpu-devices-to-allocate": "GPU-node-a-0,NVIDIA,3000,30:;",
              "hami.io/vgpu-devices-allocated": "GPU-node-a-0,NVIDIA,3000,30:;"}

REGISTER = ('[{"id":"GPU-0a1b","count":10,"devmem":81559,"devcore":100,"type":"NVIDIA-NVIDIA H100 80GB HBM3",'
            '"mode":"hami-core","health":true},{"id":"GPU-2c3d","index":1,"count":10,"devmem":81559,'
            '"devcore":100,"type":"NVIDIA-NVIDIA H100 80GB HBM3","numa":1,"mode":"hami-core"}]')


def review(operation, obj, old=None, user="alice", uid="705ab4f5-6393-11e8-b7cc-42010a800002"):
    req = {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
           "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": "default",
           "operation": operation, "userInfo": {"username": user}, "object": obj}
    if old is not None:
        req["oldObject"] = old
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": req}


def args(p, nodes):
    return dumps({"Pod": p, "Nodes": None, "NodeNames": nodes})


def bind_args(p, node):
    return dumps({"PodName": p["metadata"]["name"], "PodNamespace": "default", "PodUID": p["metadata"]["uid"],
                  "Node": node})


OCI_CONFIG = {
    "ociVersion": "1.0.2",
    "process": {"user": {"uid": 0, "gid": 0}, "args": ["python3", "train.py"],
                "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
                "cwd": "/", "capabilities": {"bounding": ["CAP_CHOWN", "CAP_KILL"],
                                             "effective": ["CAP_CHOWN", "CAP_KILL"]}},
    "root": {"path": "rootfs", "readonly": False},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
               {"destination": "/var/run/nvidia-container-devices/GPU-8f0a7c8e-4e4b-4ad8-9a3f-2a0b1c2d3e4f",
                "type": "bind", "source": "/dev/null", "options": ["ro", "rbind"]}],
    "linux": {"namespaces": [{"type": "mount"}, {"type": "pid"}]},
}
OCI_PRIVILEGED = json.loads(json.dumps(OCI_CONFIG))
OCI_PRIVILEGED["process"]["capabilities"] = {"bounding": ["CAP_SYS_ADMIN", "CAP_CHOWN"]}
OCI_PRIVILEGED["mounts"] = OCI_PRIVILEGED["mounts"][:1]
OCI_PRIVILEGED["root"]["path"] = "/var/lib/containers/storage/overlay/abc/merged"
OCI_PRIVILEGED["process"]["env"][1] = "NVIDIA_VISIBLE_DEVICES=0,GPU-8f0a7c8e-4e4b-4ad8-9a3f-2a0b1c2d3e4f"
OCI_RC = {"ociVersion": "1.0.0-rc2", "process": {"env": ["NVIDIA_VISIBLE_DEVICES=none"],
                                                 "capabilities": ["CAP_SYS_ADMIN"]}, "root": {"path": "rootfs"}}

KUBECONFIG = """apiVersion: v1
kind: Config
current-context: kind-gpuslice
clusters:
- name: kind-gpuslice
  cluster:
    server: https://127.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCk1JSUM=
contexts:
- name: kind-gpuslice
  context:
    cluster: kind-gpuslice
    user: admin
    namespace: gpuslice-system
- name: other
  context:
    cluster: kind-gpuslice
    user: robot
users:
- name: admin
  user:
    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t
    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQ==
- name: robot
  user:
    token: eyJhbGciOiJSUzI1NiJ9.e30.c2ln
"""
KUBECONFIG_INSECURE = """apiVersion: v1
kind: Config
current-context: dev
clusters:
- cluster: {server: "http://localhost:8080", insecure-skip-tls-verify: true}
  name: local
contexts:
- context: {cluster: local, user: ""}
  name: dev
users: []
"""
KUBECONFIG_EXEC = """current-context: eks
clusters: [{name: eks, cluster: {server: "https://ABC.gr7.us-west-2.eks.amazonaws.com", certificate-authority: ca.crt}}]
contexts: [{name: eks, context: {cluster: eks, user: aws}}]
users:
- name: aws
  user:
    exec:
      apiVersion: client.authentication.k8s.io/v1beta1
      command: aws
      args: [eks, get-token, --cluster-name, prod]
"""

NODE_CONFIG = """# /etc/gpuslice/node.yaml
resourceName: nvidia.com/gpu
deviceSplitCount: 10
deviceMemoryScaling: 1.0
deviceCoresScaling: 10
failOnInitError: true
driverRoot: /run/nvidia/driver
kubeletDir: /var/lib/kubelet
stateDir: /var/lib/gpuslice
metricsAddr: ":9396"
deviceListStrategy: [envvar, cdi-cri]
cdiKind: gpuslice.io/gpu
packing: binpack
ignoredXids: [13, 31, 43, 45, 68, 109]
healthyRecoverySeconds: 60
sweepSeconds: 30
cleanupGraceSeconds: 60
schedulerDecisions: true
nodeName: node-a
kubeconfig: ""
version: v1
"""

LIMITS = """# written by the node agent for container 4f2c...
CUDA_DEVICE_MEMORY_LIMIT_0=10240m
CUDA_DEVICE_SM_LIMIT_0=30
GPUSLICE_DEVICE_UUID_0=GPU-8f0a7c8e-4e4b-4ad8-9a3f-2a0b1c2d3e4f
CUDA_DEVICE_MEMORY_LIMIT_1=20g
CUDA_DEVICE_SM_LIMIT_1=50
GPUSLICE_DEVICE_UUID_1=GPU-2c3d0000-1111-2222-3333-444444444444
CUDA_DEVICE_MEMORY_SHARED_CACHE=/var/lib/gpuslice/containers/4f2c/region
GPUSLICE_CARDS_DIR=/var/lib/gpuslice/cards
GPU_CORE_UTILIZATION_POLICY=default
CUDA_TASK_PRIORITY=1
CUDA_OVERSUBSCRIBE=false
export GPUSLICE_CONTEXT_OVERHEAD=518Mi
"""
ENV = """PATH=/usr/bin:/bin
CUDA_DEVICE_MEMORY_LIMIT=4g
CUDA_DEVICE_SM_LIMIT=20
GPU_CORE_UTILIZATION_POLICY=force
LIBCUDA_LOG_LEVEL=4
CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/vgpu/region.cache
GPUSLICE_CONTEXT_OVERHEAD=1Gi"""

two_containers = pod("two", init=[{"name": "init", "resources": {"limits": {"nvidia.com/gpu": "1"}}}])
two_containers["spec"]["containers"].append(
    {"name": "side", "resources": {"requests": {"nvidia.com/gpumem-percentage": "50", "cpu": "500m"}}})
annotated = pod("annotated", annotations={"nvidia.com/use-gputype": "H100,A100", "nvidia.com/nouse-gpuuuid": "GPU-x",
                                          "nvidia.com/numa-bind": "true",
                                          "hami.io/gpu-scheduler-policy": "binpack,numa",
                                          "hami.io/node-scheduler-policy": "spread"})
whole = pod("whole", limits={"nvidia.com/gpu": "2"})
big = pod("big", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "80Gi", "nvidia.com/gpucores": "1e2"})
pending = pod("pending", annotations=ALLOCATING, node="node-a")
pending2 = pod("pending2", limits={"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1000"}, node="node-a",
               annotations=dict(ALLOCATING, **{
                   "hami.io/vgpu-devices-to-allocate": ";GPU-a,NVIDIA,1000,0:GPU-b,NVIDIA,1000,0:;",
                   "hami.io/vgpu-devices-allocated": "GPU-c,NVIDIA,1000,0:;GPU-a,NVIDIA,1000,0:GPU-b,NVIDIA,1000,0:;"}),
               init=[{"name": "i", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}])

corpora = {
    "quantity": ["4g", "10240m", "80Gi", "512MiB", "1024", "  7 kib \n", "3k", "1.5", "500m", "5e3", "-2",
                 "18446744073709551615", "1E", "0"],
    "visible_devices": ["all", "none", "void", "", "0,1", "GPU-8f0a7c8e-4e4b-4ad8-9a3f-2a0b1c2d3e4f",
                        "0,GPU-00000001-1111-2222-3333-444444444444,0", "GPU-00000002-1111-2222-3333-444444444444::3",
                        " 1 , 2 ", "MIG-GPU-abc/1/0", "3,4,5"],
    "oci_config": [dumps(OCI_CONFIG), dumps(OCI_PRIVILEGED), dumps(OCI_RC)],
    "oci_state": [dumps({"ociVersion": "1.0.2", "id": "4f2c", "status": "created", "pid": 4242,
                         "bundle": "BUNDLE", "annotations": {"io.kubernetes.cri.container-type": "container"}})
                  + SEP + dumps(OCI_CONFIG),
                  dumps({"ociVersion": "1.0.0", "id": "x", "pid": 1, "bundle": "BUNDLE"}) + SEP + dumps(OCI_RC),
                  dumps({"pid": 7, "bundle": "BUNDLE/../BUNDLE"}) + SEP + dumps(OCI_PRIVILEGED)],
    "extender_args": [args(pod(), ["node-a", "node-b"]), args(two_containers, ["n\\u00e9ud-\"1\""]),
                      '{"Pod":{},"Nodes":null,"NodeNames":[]}', '{"NodeNames":["a"],"Pod":{"metadata":{}},"Pod":{}}'],
    "extender": ["F" + args(pod(), ["node-a", "node-b", "node-c"]) + SEP + "P" + args(pod(), ["node-a", "node-b"])
                 + SEP + "B" + bind_args(pod(), "node-b"),
                 "F" + args(whole, ["node-a", "node-b"]) + SEP + "B" + bind_args(whole, "node-a") + SEP + "F"
                 + args(big, ["node-a"]) + SEP + "B" + bind_args(big, "node-a"),
                 "O" + dumps(pending) + SEP + "F" + args(pod("twin"), ["node-a"]) + SEP + "B"
                 + bind_args(pod("twin"), "node-a"),
                 "B" + bind_args(pod("unseen"), "node-a"), "P" + args(annotated, ["node-b"]),
                 "R" + dumps(pending) + SEP + "F" + args(whole, ["node-a", "node-b"]) + SEP + "B"
                 + bind_args(whole, "node-a")],
    "pod_spec": [dumps(pod()), dumps(two_containers), dumps(annotated), dumps(whole), dumps(big),
                 dumps(pod("cpu", limits={"cpu": "2", "memory": "1Gi"}))],
    "hami_format": [REGISTER, "GPU-a,10,40960,100,NVIDIA-A100,0,true:GPU-b,10,40960,100,NVIDIA-A100,1,false,1,hami-core:",
                    "GPU-a,NVIDIA,2048,25:;", ";GPU-a,NVIDIA,1000,0:GPU-b,NVIDIA,1000,0:;",
                    "Requesting_2026-11-15 10:00:00", "Reported 2026-11-15 10:00:00", "Deleted_2026-11-15 10:00:00",
                    "nvidia.com/use-gputype=H100,A100\nnvidia.com/nouse-gpuuuid=GPU-x\nnvidia.com/numa-bind=T\n"
                    "hami.io/gpu-scheduler-policy=binpack,numa\nhami.io/node-scheduler-policy=spread\n"
                    "hami.io/vgpu-node=node-a\nhami.io/vgpu-devices-allocated=GPU-a,NVIDIA,2048,25:;\n"],
    "handoff": [dumps(pending), dumps(pending2), dumps(pod("done", annotations=dict(ALLOCATING, **{
        "hami.io/bind-phase": "success", "hami.io/vgpu-devices-to-allocate": ";"}), node="node-a"))],
    "webhook": [dumps(review("CREATE", pod(scheduler="default-scheduler"))),
                dumps(review("CREATE", pod("share", limits={"nvidia.com/gpumem": "2000"}, annotations=ALLOCATING))),
                dumps(review("UPDATE", pod("p", annotations={"hami.io/vgpu-node": "node-b"}),
                             old=pod("p", annotations=ALLOCATING))),
                dumps(review("UPDATE", {"metadata": {"name": "p"}}, old=pod("p", annotations=ALLOCATING))),
                dumps(review("UPDATE", pod("p"), old=pod("p", annotations=ALLOCATING),
                             user="system:serviceaccount:gpuslice-system:gpuslice-scheduler")),
                dumps(review("DELETE", pod())), '{"request":{}}'],
    "kubeconfig": [KUBECONFIG, KUBECONFIG_INSECURE, KUBECONFIG_EXEC],
    "kube_api": ["\x01\x94" + dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                    "message": "pods \"x\" not found", "reason": "NotFound", "code": 404}),
                 "\x00\x00" + dumps({"kind": "Status", "status": "Failure", "message": "too old resource version",
                                    "reason": "Expired", "code": 410}),
                 "\x01\x99" + dumps({"kind": "Status", "reason": "Conflict", "code": 409, "message":
                                    "the object has been modified"})],
    "node_config": [NODE_CONFIG, "deviceSplitCount: 4\npacking: spread\ndeviceListStrategy: envvar,cdi-cri\n",
                    "", "unknownKey: 1\n", "ignoredXids: 13\n"],
    "enforcer_config": [LIMITS + SEP + ENV, "NOFILE" + SEP + ENV,
                        "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_SM_LIMIT=100\n" + SEP
                        + "CUDA_DEVICE_MEMORY_LIMIT_0=8g\nCUDA_DEVICE_SM_LIMIT_0=10\nCUDA_TASK_PRIORITY=0"],
}


# --- region and card: a shape byte, then patches of the real writer's file (fuzz/region_fuzzer.cc).
def le(n, width):
    return (n % (1 << (8 * width))).to_bytes(width, "little")


def rpatch(where, data):
    """A region patch: ("header", off) | ("device", d, off) | ("slot", s, off) | ("abs", off)."""
    kind = where[0]
    if kind == "header":
        head = b"\x00" + le(where[1], 1)
    elif kind == "device":
        head = b"\x01" + le(where[1], 1) + le(where[2], 1)
    elif kind == "slot":
        head = b"\x02" + le(where[1], 2) + le(where[2], 2)
    else:
        head = b"\x03" + le(where[1], 3)
    return head + le(len(data), 1) + data


def cpatch(where, data):
    """A card patch: ("header", off) | ("tenant", i, off) | ("abs", off)."""
    kind = where[0]
    if kind == "header":
        head = b"\x00" + le(where[1], 1)
    elif kind == "tenant":
        head = b"\x01" + le(where[1], 1) + le(where[2], 1)
    else:
        head = b"\x02" + le(where[1], 2)
    return head + le(len(data), 1) + data


U64 = lambda n: le(n, 8)
U32 = lambda n: le(n, 4)
REGION_SLOT0 = 128 + 16 * 256  # offsetof(Region, procs); a slot is 280 bytes
REGION = [
    b"\x00",                                                        # as the enforcer left it
    b"\x08",                                                        # write the host pid of the 2nd process
    b"\x00" + rpatch(("header", 40), U64(7)),                      # a writer inside (odd seq)
    b"\x00" + rpatch(("device", 2, 0), b"GPU-2c3d0000-1111-2222-3333-555555555555\x00")
    + rpatch(("device", 2, 96), U64(8 << 30)) + rpatch(("device", 2, 112), U64(1 << 30)),
    b"\x00" + rpatch(("device", 0, 0), b"GPU-../../etc/passwd\x00"),  # not a UUID
    b"\x00" + rpatch(("device", 1, 0), b"A" * 96),                  # no NUL in the field
    b"\x00" + rpatch(("device", 0, 0), b"GPU-\xe2\x80\x8bzero-width\x00"),
    b"\x00" + rpatch(("device", 0, 128), U64(1 << 63)),             # spilled > used
    b"\x00" + rpatch(("slot", 0, 0), U32(0xFFFFFFFF)) + rpatch(("slot", 1, 4), U32(5000000))
    + rpatch(("slot", 5, 0), U32(1234)) + rpatch(("slot", 5, 8), U64(987654321)),
    b"\x00" + rpatch(("slot", 1023, 0), U32(4194304)) + rpatch(("slot", 1023, 4), U32(4194305)),
    b"\x00" + rpatch(("header", 0), b"NOTAREGN"),                  # another file
    b"\x00" + rpatch(("header", 0), U64(0)),                       # not initialised yet
    b"\x00" + rpatch(("header", 8), U32(2)),                       # ABI 2
    b"\x00" + rpatch(("header", 16), U64(4096)),                   # another size
    b"\x00" + rpatch(("abs", REGION_SLOT0 + 3 * 280), U32(42) + U32(4242) + U64(1)),
    b"\x04" + le(1000, 3),                                          # cut short
    b"\x04" + le(0, 3),                                             # empty (being made)
    b"\x05GSREGION\x01\x00\x00\x00",                                 # a few bytes
    b"\x06",                                                        # a symlink to a region
    b"\x07",                                                        # a FIFO
]
CARD = [
    b"\x00",
    b"\x00" + cpatch(("tenant", 5, 0), U64(99)) + cpatch(("tenant", 5, 56), U64(7000)),
    b"\x00" + cpatch(("tenant", 0, 0), U64(0)),
    b"\x00" + cpatch(("tenant", 63, 0), U64(1)) + cpatch(("tenant", 63, 56), U64((1 << 64) - 1)),
    b"\x00" + cpatch(("header", 0), U64(0)),                        # not initialised: no tenants
    b"\x00" + cpatch(("header", 0), b"NOTACARD"),
    b"\x00" + cpatch(("header", 8), U32(2)),
    b"\x00" + cpatch(("header", 16), U64(128)),
    b"\x00" + cpatch(("abs", 128 + 72 * 10), U64(12345) + U32(50)),
    b"\x04" + le(100, 2),
    b"\x05.GSCARD1",
    b"\x06",
    b"\x07",
]

# --- the allocation records: snapshot, journal, container directories (fuzz/journal_fuzzer.cc).
def rec(id_, devices, created):
    return {"created": created, "devices": devices, "id": id_}


SNAPSHOT = json.dumps({"allocations": [rec("3f9a0c5e2b7d4a61", ["GPU-a::0"], 1790000000),
                                       rec("0b12c4d5e6f70819", ["GPU-a::1", "GPU-b::0"], 1790000100)]},
                      indent=2) + "\n"
JOURNAL = "".join(dumps(x) + "\n" for x in [
    {"add": rec("77aa00bb11cc22dd", ["GPU-a::2"], 1790000200)},
    {"remove": "3f9a0c5e2b7d4a61"},
    {"remove": "0b12c4d5e6f70819"},
    {"add": rec("99ee88ff77006611", ["GPU-a::1"], 1790000300)}])
DIRS = "3f9a0c5e2b7d4a61\n0b12c4d5e6f70819\n77aa00bb11cc22dd\n99ee88ff77006611\nleftover0000000\n"
JOURNAL_SEEDS = [
    SNAPSHOT + SEP + JOURNAL + SEP + DIRS,
    "NOFILE" + SEP + JOURNAL + SEP + DIRS,
    SNAPSHOT + SEP + "NOFILE" + SEP + DIRS,
    SNAPSHOT + SEP + JOURNAL + '{"add":{"created":1790000400,"devices":["GPU-b' + SEP + DIRS,  # torn tail
    SNAPSHOT[:40] + SEP + JOURNAL + SEP + DIRS,                                                   # torn snapshot
    SNAPSHOT + SEP + JOURNAL.replace("\n", "\nnot json\n", 1) + SEP + DIRS,                     # damaged line
    '{"allocations":[]}' + SEP + "" + SEP + "",
    "" + SEP + "\n\n" + SEP + "NOFILE",
    '{"allocations":{"x":{"id":"r1","devices":[],"created":0}}}' + SEP + '{"remove":"nobody"}\n' + SEP + "r1",
]

# --- CDI specs (fuzz/cdi_spec_fuzzer.cc): J + JSON, Y + YAML.
CDI = {"cdiVersion": "0.5.0", "kind": "gpuslice.io/gpu",
       "devices": [{"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
                   {"name": "GPU-8f0a7c8e-4e4b-4ad8-9a3f-2a0b1c2d3e4f",
                    "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}},
                   {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}],
       "containerEdits": {
           "deviceNodes": [{"path": "/dev/nvidiactl"},
                           {"path": "/dev/nvidia-uvm", "hostPath": "/run/nvidia/driver/dev/nvidia-uvm"}],
           "mounts": [{"hostPath": "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
                       "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.580.65.06",
                       "options": ["ro", "nosuid", "nodev", "bind"]},
                      {"hostPath": "/var/lib/gpuslice/lib/1.0-ab12/ld.so.preload",
                       "containerPath": "/etc/ld.so.preload", "options": ["ro", "nosuid", "nodev", "bind"]}],
           "env": ["NVIDIA_VISIBLE_DEVICES=void"]}}
CDI_YAML = """cdiVersion: "0.5.0"
kind: "gpuslice.io/gpu"
devices:
  - name: "0"
    containerEdits:
      deviceNodes:
        - path: "/dev/nvidia0"
  - name: "all"
    containerEdits:
      deviceNodes:
        - path: "/dev/nvidia0"
        - path: "/dev/nvidia1"
containerEdits:
  deviceNodes:
    - path: "/dev/nvidiactl"
    - path: "/dev/nvidia-uvm"
      hostPath: "/run/nvidia/driver/dev/nvidia-uvm"
  env:
    - "NVIDIA_VISIBLE_DEVICES=void"
"""
CDI_NVIDIA = """---
cdiVersion: 0.3.0
kind: nvidia.com/gpu
annotations: {generated-by: nvidia-ctk}
devices:
- name: gpu0
  containerEdits:
    deviceNodes: [{path: /dev/nvidia0}]
- name: MIG-GPU-8f0a/1/0
  containerEdits: {}
containerEdits:
  hooks:
  - hookName: createContainer
    path: /usr/bin/nvidia-cdi-hook
    args: [nvidia-cdi-hook, update-ldcache, --folder, /usr/lib/x86_64-linux-gnu]
"""
CDI_SEEDS = ["J" + dumps(CDI), "Y" + CDI_YAML, "Y" + CDI_NVIDIA,
             "J" + dumps(dict(CDI, cdiVersion="0.3.0")),                    # below what hostPath needs
             "J" + dumps(dict(CDI, extra=1)),                               # unknown field
             "J" + dumps(dict(CDI, kind="gpuslice.io")),
             "Y" + "cdiVersion: 0.5.0\nkind: a/b\ndevices: []\n", "J[]", "Yjust text"]

# --- simulator scenarios (fuzz/scenario_fuzzer.cc).
SCENARIO_DOC = """driver_version: "580.65.06"
cuda_version: "13.0"
context_memory: 518Mi
sample_period_ms: 200
timeslice_ms: 2
gpus:
  - preset: H100-80GB
    count: 2
  - name: Custom card
    memory: 16Gi
    sms: 40
    uuid: GPU-11111111-2222-3333-4444-555555555555
    pci_bus_id: "00000000:3B:00.0"
    numa: 1
    minor: 7
    compute_capability: "8.6"
    context_memory: 300Mi
faults:
  - {at: 10s, gpu: 0, xid: 48}
  - {at: 20s, gpu: 1, lost: true}
"""
SCENARIO_SEEDS = [SCENARIO_DOC, "gpus: 2xH100-80GB,1xT4\n", "gpus: [T4, L4, A100-40GB, A100-80GB, H200-141GB]\n",
                  "gpus: [{preset: A100-40GB, count: 2}]\nfaults: [{at: 500ms, gpu: 1, lost: true}, "
                  "{at: 1.5m, gpu: 0, xid: 79}]\n",
                  "gpus: 17xT4\n", "gpus: [{name: X, memory: lots, sms: 1}]\n", "gpus: [unclosed\n",
                  "cuda_version: 12\ntimeslice_ms: 0.05\nsample_period_ms: 10000\ngpus: T4\n"]

# --- requests to the node agent's HTTP server (fuzz/http_request_fuzzer.cc): a byte for
# the size of the pieces it arrives in, then the bytes.
HTTP_SEEDS = [
    "\xff" + "GET /metrics HTTP/1.1\r\nHost: 10.0.0.5:9396\r\nUser-Agent: Prometheus/2.53.0\r\n"
    "Accept: application/openmetrics-text;version=1.0.0;q=0.5,*/*;q=0.1\r\nAccept-Encoding: gzip\r\n"
    "X-Prometheus-Scrape-Timeout-Seconds: 10\r\n\r\n",
    "\x00" + "GET /healthz HTTP/1.1\r\nHost: 10.0.0.5:9396\r\nUser-Agent: kube-probe/1.30\r\nAccept: */*\r\n"
    "Connection: close\r\n\r\n",
    "\x10" + "HEAD /metrics?x=1&y=a%20b HTTP/1.0\r\n\r\n",
    "\x10" + "POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody",
    "\x01" + "garbage\r\n\r\n",
    "\x20" + "GET / x HTTP/1.1\r\n\r\n",
    "\xff" + "GET /metrics HTTP/1.1\r\nX: " + "a" * 9000,
    "\x04" + "GET /metrics HTTP/1.1\r\n",
]


# --- the kubelet's requests (fuzz/device_plugin_request_fuzzer.cc): a byte of options,
# then the protobuf message (api/deviceplugin/v1beta1/api.proto), encoded here by hand.
def varint(n):
    n %= 1 << 64
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, value):
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    if isinstance(value, str):
        value = value.encode()
    return varint((number << 3) | 2) + varint(len(value)) + value


def allocate(*containers, legacy=False):
    msg = b"".join(field(1, b"".join(field(1, i) for i in ids)) for ids in containers)
    return bytes([1 | (2 if legacy else 0)]) + msg


def prefer(*containers, legacy=False, binpack=False):
    msg = b""
    for available, must, size in containers:
        body = b"".join(field(1, i) for i in available) + b"".join(field(2, i) for i in must) + field(3, size)
        msg += field(1, body)
    return bytes([(2 if legacy else 0) | (4 if binpack else 0)]) + msg


SLICES = ["GPU-%s::%d" % (g, k) for g in ("a", "b", "dead") for k in range(4)]
DEVICE_PLUGIN = [
    allocate(["GPU-b::1"]),
    allocate(["GPU-a::0", "GPU-b::0"]),                  # takes old's slice: old is dropped
    allocate(["GPU-a::1"], ["GPU-b::2"]),
    allocate(["GPU-a::1"], ["GPU-c::0"]),                # an unknown card: nothing stays
    allocate(["GPU-dead::0"]), allocate(["GPU-a::7"]), allocate(["GPU-a::1", "GPU-a::2"]),
    allocate(["GPU-a::1", "GPU-a::2"], legacy=True),     # remapped to distinct cards
    allocate([]),
    prefer((SLICES, ["GPU-b::3"], 3)),
    prefer((SLICES, [], 2), binpack=True),
    prefer((SLICES[:6], ["GPU-a::0", "GPU-x::1"], 0), (SLICES, [], -1)),
    prefer((["GPU-a::1", "GPU-a::1", "GPU-dead::2", "junk"], [], 4)),
]

# /proc/<pid>/mountinfo of container processes (fuzz/mountinfo_fuzzer.cc).
MOUNTINFO = [
    "1190 1010 0:112 / / rw,relatime master:470 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w\n"
    "1191 1190 0:115 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "1200 1190 0:58 / /var/run/gpuslice rw,nosuid,nodev,noexec,relatime master:301 - tmpfs gpuslice-shared "
    "rw,size=4096k,nr_inodes=64\n"
    "1201 1190 8:1 /var/lib/gpuslice/containers/ab/limits /etc/gpuslice/limits ro,relatime - ext4 /dev/sda1 rw\n",
    "36 35 0:58 / /run/gpuslice rw shared:1 master:2 - tmpfs gpuslice-shared rw\n"
    "37 36 0:59 / /run/gpu\\040slice\\012x rw - tmpfs t rw\n",
    "36 35 058 / /var/run/gpuslice rw - tmpfs t rw\n36 35 0:58 /\n\n36 35 0:4294967295 / /a rw - t",
]

corpora.update({"mountinfo": MOUNTINFO, "region": REGION, "card": CARD, "journal": JOURNAL_SEEDS, "cdi_spec": CDI_SEEDS,
                "scenario": SCENARIO_SEEDS, "http_request": HTTP_SEEDS,
                "device_plugin_request": DEVICE_PLUGIN})
LATIN1 = {"kube_api", "http_request"}  # str seeds whose characters are bytes

for target, seeds in corpora.items():
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for i, seed in enumerate(seeds):
        with open(os.path.join(d, "seed-%02d" % i), "wb") as f:
            f.write(seed if isinstance(seed, bytes) else seed.encode("latin-1") if target in LATIN1 else seed.encode())
print("wrote", sum(len(s) for s in corpora.values()), "seeds", file=sys.stderr)
