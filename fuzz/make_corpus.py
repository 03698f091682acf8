#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ from realistic inputs (the formats in
docs/, src/ and ../shared/reference/). Run again after changing a seed; the files are
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

for target, seeds in corpora.items():
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for i, seed in enumerate(seeds):
        with open(os.path.join(d, "seed-%02d" % i), "wb") as f:
            f.write(seed.encode("latin-1") if target == "kube_api" else seed.encode())
print("wrote", sum(len(s) for s in corpora.values()), "seeds", file=sys.stderr)
