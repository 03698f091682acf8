#!/usr/bin/env bash
# A one-node Kubernetes v1.20.2 cluster on loopback, for the end-to-end tests: etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler, containerd and a kubelet, plus a
# simulated GPU node (`gpuslice sim`) and the node agent (`gpuslice node`) registered with
# the kubelet. Every file it writes is under one directory ($GPUSLICE_E2E_DIR, default
# /tmp/gpuslice-e2e), apart from what the kubelet insists on (below).
#
#   tests/e2e/cluster.sh up [--build DIR] [--extender URL]   (re)starts everything
#   tests/e2e/cluster.sh up --control-plane [--build DIR] [--extender URL]
#                                                            only etcd, the API server and the two
#                                                            kube-schedulers: no kubelet,
#                                                            containerd, controller-manager or
#                                                            agent (Node objects are made through
#                                                            the API: bench/cluster/throughput.sh)
#   tests/e2e/cluster.sh gpu-scheduler [EXTENDER_URL]        (re)starts the GPU pods' kube-scheduler
#                                                            with this extender (none: stops it)
#   tests/e2e/cluster.sh env                                 exports for a shell (KUBECONFIG, PATH)
#   tests/e2e/cluster.sh down                                stops what `up` started, cleans up
#
# Needs root (containers, mounts, device nodes), the Debian packages of
# `scripts/install-deps.sh e2e`, and the binaries of scripts/kubernetes-build.sh.
#
# Outside the directory, as the kubelet 1.20 hard-codes them: /var/lib/kubelet (its
# device-plugins/kubelet.sock is where device plugins register), /var/log/pods and
# /var/log/containers, the kubepods cgroups and six sysctls the kubelet sets at start.
# `down` restores the sysctls, unmounts and removes those paths when `up` created them.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
D=${GPUSLICE_E2E_DIR:-/tmp/gpuslice-e2e}
# The node's name is its address: kubelet 1.20 refuses a loopback --node-ip, but takes an
# IP given as --hostname-override as the node's InternalIP, which is where the API server
# reaches the kubelet (kubectl logs): so it stays on loopback.
NODE=${GPUSLICE_E2E_NODE:-127.0.0.1}
# Fixed ports below the ephemeral range (32768+) so no outgoing connection holds one.
ETCD_PORT=23790 ETCD_PEER_PORT=23800 API_PORT=26443 KUBELET_PORT=20250 KUBELET_HEALTHZ=20248
CM_PORT=20257 SCHED_PORT=20259 SCHED_HEALTHZ=20251 GPU_SCHED_PORT=20261 GPU_SCHED_HEALTHZ=20253
GPU_SCHEDULER_NAME=${GPUSLICE_E2E_SCHEDULER_NAME:-gpuslice-scheduler}
# Service addresses are only records here (no kube-proxy): a loopback range keeps even
# those on this machine.
SERVICE_CIDR=127.96.0.0/24
KUBELET_ROOT=/var/lib/kubelet
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys
  kernel.keys.root_maxbytes)

log() { echo "cluster: $*" >&2; }
die() {
  echo "cluster: FAILED: $*" >&2
  exit 1
}

# --- processes -------------------------------------------------------------------------

# start NAME CMD...: runs CMD in the background with its output in $D/logs/NAME.log and
# its pid in $D/pids/NAME.pid. setsid keeps our terminal's signals away from it.
start() {
  local name=$1
  shift
  setsid "$@" >"$D/logs/$name.log" 2>&1 </dev/null &
  local pid=$! i
  echo "$pid" >"$D/pids/$name.pid"
  echo "$1" >"$D/pids/$name.pid.cmd"
  # Until the child has exec'd, its command line is this script's, and running() would
  # call it gone: wait for the exec (or the exit) first. On a loaded machine this takes
  # a while.
  for ((i = 0; i < 200; i++)); do
    grep -qF -- "$1" "/proc/$pid/cmdline" 2>/dev/null && return 0
    [ -d "/proc/$pid" ] || return 0
    sleep 0.05
  done
}

# The state letter of process PID (/proc/PID/stat, after the command name); empty when
# there is no such process.
proc_state() { sed -n 's/^.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null || true; }

# True while the process recorded for NAME is alive and still runs the program we started
# (a pid can be reused by an unrelated process after ours exits). A command line reads
# empty for a moment while its process execs (setsid becoming the program: a large Go
# binary, under load), so an empty one is judged by the process state alone; a zombie
# (exited, not yet reaped) has an empty one too, and is gone.
running() {
  local f=$D/pids/$1.pid pid exe state
  [ -f "$f" ] || return 1
  pid=$(cat "$f")
  state=$(proc_state "$pid")
  [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ] || return 1
  exe=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || return 0
  [ -z "$exe" ] || grep -qF -- "$(cat "$f.cmd" 2>/dev/null || echo "$exe")" <<<"$exe"
}

# Stops NAME's process by its recorded pid: TERM, then KILL after 15 s.
stop() {
  local name=$1 pid i
  if running "$name"; then
    pid=$(cat "$D/pids/$name.pid")
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      [ -d "/proc/$pid" ] || break
      sleep 0.1
    done
    if [ -d "/proc/$pid" ]; then
      log "$name (pid $pid) ignored TERM for 15 s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$D/pids/$name.pid" "$D/pids/$name.pid.cmd"
}

# Sets ENDED to how NAME's process ended: "exit status N" or "killed by signal N" when
# this shell started it, else what /proc still shows of the pid (a program other than the
# one started, or a pid that is not ours). Not in $(...): a subshell cannot wait for it.
how_it_ended() {
  local pid rc state exe
  ENDED="no pid recorded"
  pid=$(cat "$D/pids/$1.pid" 2>/dev/null) || return 0
  state=$(proc_state "$pid")
  if [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]; then
    exe=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || exe=
    ENDED="pid $pid, state $state, runs: ${exe:0:200}"
    return 0
  fi
  wait "$pid" 2>/dev/null && rc=0 || rc=$?
  if ((rc == 127)); then
    ENDED="pid $pid is gone, not a child of this shell"
  elif ((rc > 128)); then
    ENDED="killed by signal $((rc - 128))"
  else
    ENDED="exit status $rc"
  fi
}

# wait_for WHAT TIMEOUT_S CMD...: polls CMD every 0.5 s; on timeout prints the component's
# log tail and fails.
wait_for() {
  local what=$1 timeout=$2 logname=$3 deadline
  shift 3
  deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$logname" ] && ! running "$logname"; then
      tail -30 "$D/logs/$logname.log" >&2 || true
      how_it_ended "$logname"
      die "$logname exited while waiting for $what ($ENDED; log: $D/logs/$logname.log)"
    fi
    if ((SECONDS >= deadline)); then
      [ -n "$logname" ] && { tail -30 "$D/logs/$logname.log" >&2 || true; }
      die "timed out after ${timeout}s waiting for $what${logname:+ (log: $D/logs/$logname.log)}"
    fi
    sleep 0.5
  done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# --- PKI -------------------------------------------------------------------------------

# cert NAME SUBJECT [SAN]: a key and a certificate signed by the cluster CA.
cert() {
  local name=$1 subj=$2 san=${3:-} ext=$D/pki/$1.ext
  openssl genrsa -out "$D/pki/$name.key" 2048 2>/dev/null
  openssl req -new -key "$D/pki/$name.key" -subj "$subj" -out "$D/pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    if [ -n "$san" ]; then
      echo "extendedKeyUsage=serverAuth,clientAuth"
      echo "subjectAltName=$san"
    else
      echo "extendedKeyUsage=clientAuth"
    fi
  } >"$ext"
  openssl x509 -req -in "$D/pki/$name.csr" -CA "$D/pki/ca.crt" -CAkey "$D/pki/ca.key" -CAcreateserial \
    -days 30 -sha256 -extfile "$ext" -out "$D/pki/$name.crt" 2>/dev/null
}

kubeconfig() {
  local name=$1 user=$2
  cat >"$D/kubeconfig/$name" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    certificate-authority: $D/pki/ca.crt
    server: https://127.0.0.1:$API_PORT
users:
- name: $user
  user:
    client-certificate: $D/pki/$user.crt
    client-key: $D/pki/$user.key
contexts:
- name: e2e
  context: {cluster: e2e, user: $user}
current-context: e2e
EOF
}

make_pki() {
  log "PKI (openssl): CA, serving and client certificates, kubeconfigs"
  mkdir -p "$D/pki" "$D/kubeconfig"
  openssl genrsa -out "$D/pki/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$D/pki/ca.key" -subj "/CN=gpuslice-e2e-ca" -days 30 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$D/pki/ca.crt" 2>/dev/null
  cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:${SERVICE_CIDR%.0/*}.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
  cert kubelet-serving "/CN=$NODE" "IP:127.0.0.1,DNS:localhost"
  cert admin "/O=system:masters/CN=e2e-admin"
  cert scheduler "/CN=system:kube-scheduler"
  cert controller-manager "/CN=system:kube-controller-manager"
  cert kubelet "/O=system:nodes/CN=system:node:$NODE"
  cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
  # `gpuslice scheduler`: its API identity, and its webhook's serving certificate.
  cert gpuslice-scheduler "/O=system:masters/CN=gpuslice-scheduler"
  cert webhook "/CN=gpuslice-webhook" "IP:127.0.0.1,DNS:localhost"
  # `gpuslice node --scheduler-decisions`: publishes its cards on the Node and claims
  # the decisions written on pods.
  cert gpuslice-node "/O=system:masters/CN=gpuslice-node"
  openssl genrsa -out "$D/pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$D/pki/sa.key" -pubout -out "$D/pki/sa.pub" 2>/dev/null
  kubeconfig admin.kubeconfig admin
  kubeconfig scheduler.kubeconfig scheduler
  kubeconfig controller-manager.kubeconfig controller-manager
  kubeconfig kubelet.kubeconfig kubelet
  kubeconfig gpuslice-scheduler.kubeconfig gpuslice-scheduler
  kubeconfig gpuslice-node.kubeconfig gpuslice-node
}

# --- images ----------------------------------------------------------------------------

# oci_image NAME:TAG ROOTFS CMD...: an image from a directory, through an umoci OCI
# layout and skopeo's docker archive (which carries the full name for `ctr import`).
oci_image() {
  local ref=$1 rootfs=$2 layout bundle tar
  shift 2
  layout=$D/images/layout-${ref//[:\/]/_}
  bundle=$D/images/bundle-${ref//[:\/]/_}
  tar=$D/images/${ref//[:\/]/_}.tar
  rm -rf "$layout" "$bundle" "$tar"
  umoci init --layout "$layout"
  umoci new --image "$layout:img"
  umoci unpack --image "$layout:img" "$bundle" >/dev/null
  cp -a "$rootfs/." "$bundle/rootfs/"
  umoci repack --image "$layout:img" "$bundle"
  local args=() a
  for a in "$@"; do args+=(--config.cmd "$a"); done
  umoci config --image "$layout:img" "${args[@]}"
  skopeo --insecure-policy copy -q "oci:$layout:img" "docker-archive:$tar:$ref"
  ctr --address "$D/containerd/containerd.sock" -n k8s.io images import "$tar" >/dev/null
  rm -rf "$layout" "$bundle"
}

# copy_with_libs ROOT FILE...: FILE into ROOT at the same path, with every shared library
# ldd resolves for it (the image then runs a dynamically linked program with glibc's
# real loader, which honours /etc/ld.so.preload: the enforcer's way in).
copy_with_libs() {
  local root=$1 f lib
  shift
  for f in "$@"; do
    mkdir -p "$root$(dirname "$f")"
    cp -L "$f" "$root$f"
    { ldd "$f" 2>/dev/null || true; } | awk '/=> \// { print $3 } /^\t\/lib/ { print $1 }' | while read -r lib; do
      case $lib in */libcuda.so* | */libnvidia-ml.so*) continue ;; esac # the driver comes from the node
      [ -e "$root$lib" ] && continue
      mkdir -p "$root$(dirname "$lib")"
      cp -L "$lib" "$root$lib"
    done
  done
}

make_images() {
  local kbin=$1 build=$2 r
  log "images: k8s.gcr.io/pause:3.2 (build/pause of the source), gpuslice-e2e:1 (busybox, cuda_probe, gpuslice)"
  r=$D/images/pause-root
  mkdir -p "$r"
  install -m 0755 "$kbin/pause" "$r/pause"
  oci_image k8s.gcr.io/pause:3.2 "$r" /pause

  r=$D/images/test-root
  mkdir -p "$r"/{bin,etc,dev,proc,sys,tmp,usr/lib/x86_64-linux-gnu,var/run}
  install -m 0755 /bin/busybox "$r/bin/busybox"
  local a
  for a in sh cat env grep ls echo sleep test readlink id head tr sed awk wc sort; do ln -sf busybox "$r/bin/$a"; done
  echo "root:x:0:0:root:/:/bin/sh" >"$r/etc/passwd"
  echo "root:x:0:" >"$r/etc/group"
  # cuda_probe, gpuslice and what the enforcer and the simulated driver load, so all of
  # them work in the container (the driver libraries themselves are mounted from the node).
  [ -x "$build/tests/cuda_probe" ] || die "$build/tests/cuda_probe not built (make build)"
  copy_with_libs "$r" "$build/tests/cuda_probe" "$build/bin/gpuslice" "$build/enforcer/libgpuslice.so" \
    "$build/sim/lib/libcuda.so.1" "$build/sim/lib/libnvidia-ml.so.1"
  mv "$r$build/tests/cuda_probe" "$r/bin/cuda_probe"
  # gpuslice for `burn` and `smi` in pods, without its debug information.
  strip -o "$r/bin/gpuslice" "$r$build/bin/gpuslice"
  # The libraries were copied for their dependencies only: the node supplies them (the
  # agent mounts the enforcer, the pod the driver).
  rm -rf "${r:?}/${build#/}"
  oci_image gpuslice-e2e:1 "$r" /bin/sh
}

# --- components ------------------------------------------------------------------------

write_containerd_config() {
  mkdir -p "$D/containerd/root" "$D/containerd/state" "$D/cni/net.d"
  # Only the loopback plugin: the node turns Ready and hostNetwork pods run, with no
  # interface, address or route added anywhere.
  cat >"$D/cni/net.d/10-loopback.conflist" <<'EOF'
{"cniVersion": "0.4.0", "name": "e2e-loopback", "plugins": [{"type": "loopback"}]}
EOF
  cat >"$D/containerd/config.toml" <<EOF
version = 2
root = "$D/containerd/root"
state = "$D/containerd/state"
# Plugins that would write outside our directories or need what the machine lacks.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$D/containerd/containerd.sock"
[ttrpc]
  address = "$D/containerd/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "k8s.gcr.io/pause:3.2"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # CAP_SYS_RESOURCE is dropped on these machines: runc fails every sandbox with "can't
  # get final child's PID from pipe" when asked to lower oom_score_adj.
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$D/containerd/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$D/cni/net.d"
EOF
}

write_kubelet_config() {
  mkdir -p "$D/kubelet"
  cat >"$D/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ
tlsCertFile: $D/pki/kubelet-serving.crt
tlsPrivateKeyFile: $D/pki/kubelet-serving.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $D/pki/ca.crt}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failSwapOn: false
# No iptables chains on the host: nothing here routes service traffic.
makeIPTablesUtilChains: false
# The test images cannot be pulled again: never garbage-collect them, and do not evict
# on a nearly full CI disk.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "50Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
# 1.20's defaults (5/10) throttle the status manager's GET + PATCH per pod status change:
# 40 pods started at once had their containers running after ~8 s but showed Running in
# the API only ~18 s later. 50/100 are the defaults since Kubernetes 1.27.
kubeAPIQPS: ${GPUSLICE_E2E_KUBELET_QPS:-50}
kubeAPIBurst: ${GPUSLICE_E2E_KUBELET_BURST:-100}
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
fileCheckFrequency: 5s
runtimeRequestTimeout: 2m
EOF
}

# scheduler_config FILE SCHEDULER_NAME HEALTHZ_PORT [EXTENDER_URL]
scheduler_config() {
  local file=$1 name=$2 healthz=$3 extender=${4:-}
  cat >"$file" <<EOF
apiVersion: kubescheduler.config.k8s.io/v1beta1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: $D/kubeconfig/scheduler.kubeconfig
  # 1.20's defaults are 50/100: they cap the scheduler's own API calls (binds when no
  # extender binds, events, status updates). A bench at thousands of pods raises them.
  qps: ${GPUSLICE_E2E_SCHED_QPS:-50}
  burst: ${GPUSLICE_E2E_SCHED_BURST:-100}
EOF
  # Unset: 1.20's adaptive default (50 % - nodes/125, at least 5 % and 100 nodes).
  [ -z "${GPUSLICE_E2E_SCHED_PERCENTAGE:-}" ] || echo "percentageOfNodesToScore: $GPUSLICE_E2E_SCHED_PERCENTAGE" >>"$file"
  cat >>"$file" <<EOF
leaderElection:
  leaderElect: false
# Without these, kube-scheduler 1.20 serves its insecure port on 0.0.0.0.
healthzBindAddress: 127.0.0.1:$healthz
metricsBindAddress: 127.0.0.1:$healthz
profiles:
- schedulerName: $name
EOF
  [ -n "$extender" ] || return 0
  # gpumem, gpumem-percentage and gpucores are no node's resources: kube-scheduler must
  # leave them to the extender (ignoredByScheduler), and the kubelet admits pods asking
  # for resources the node does not advertise at all.
  cat >>"$file" <<EOF
extenders:
- urlPrefix: $extender
  filterVerb: filter
  prioritizeVerb: prioritize
  bindVerb: bind
  weight: 1
  enableHTTPS: false
  nodeCacheCapable: true
  ignorable: false
  httpTimeout: 30s
  managedResources:
  - {name: nvidia.com/gpu, ignoredByScheduler: false}
  - {name: nvidia.com/gpumem, ignoredByScheduler: true}
  - {name: nvidia.com/gpumem-percentage, ignoredByScheduler: true}
  - {name: nvidia.com/gpucores, ignoredByScheduler: true}
EOF
}

# Two kube-scheduler instances, as HAMi deploys them: `kube-scheduler` is the cluster's
# default-scheduler, with no extender; `gpu-scheduler` serves the profile GPU pods name in
# spec.schedulerName ($GPU_SCHEDULER_NAME, what `gpuslice scheduler`'s webhook sets) and
# calls the extender. Checks that need no extender never depend on it being up.
# start_scheduler KBIN INSTANCE [EXTENDER_URL]
start_scheduler() {
  local kbin=$1 instance=$2 extender=${3:-} name port healthz
  case $instance in
    kube-scheduler) name=default-scheduler port=$SCHED_PORT healthz=$SCHED_HEALTHZ ;;
    gpu-scheduler) name=$GPU_SCHEDULER_NAME port=$GPU_SCHED_PORT healthz=$GPU_SCHED_HEALTHZ ;;
    *) die "unknown scheduler instance $instance" ;;
  esac
  stop "$instance"
  [ "$instance" = kube-scheduler ] || [ -n "$extender" ] || return 0
  scheduler_config "$D/$instance.yaml" "$name" "$healthz" "$extender"
  log "kube-scheduler '$name'${extender:+ with extender $extender}"
  start "$instance" "$kbin/kube-scheduler" --config="$D/$instance.yaml" --port=0 \
    --bind-address=127.0.0.1 --secure-port="$port" \
    --authentication-kubeconfig="$D/kubeconfig/scheduler.kubeconfig" \
    --authorization-kubeconfig="$D/kubeconfig/scheduler.kubeconfig" --v=2
  wait_for "kube-scheduler '$name' healthz" 60 "$instance" curl -sf "http://127.0.0.1:$healthz/healthz"
}

start_etcd() {
  log "etcd (127.0.0.1:$ETCD_PORT)"
  start etcd "$(command -v etcd)" --name e2e --data-dir "$D/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" --log-level warn
}

# start_apiserver KBIN [FLAGS...]: the API server, and KUBECONFIG set to the admin's.
start_apiserver() {
  local kbin=$1
  shift
  log "kube-apiserver (https://127.0.0.1:$API_PORT)"
  start kube-apiserver "$kbin/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=$API_PORT --insecure-port=0 \
    --service-cluster-ip-range=$SERVICE_CIDR --endpoint-reconciler-type=none \
    --client-ca-file="$D/pki/ca.crt" --tls-cert-file="$D/pki/apiserver.crt" --tls-private-key-file="$D/pki/apiserver.key" \
    --service-account-key-file="$D/pki/sa.pub" --service-account-signing-key-file="$D/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --kubelet-client-certificate="$D/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$D/pki/apiserver-kubelet-client.key" --kubelet-certificate-authority="$D/pki/ca.crt" \
    --kubelet-preferred-address-types=InternalIP --authorization-mode=Node,RBAC --allow-privileged=true \
    --enable-admission-plugins=NodeRestriction "$@"
  export KUBECONFIG=$D/kubeconfig/admin.kubeconfig
  wait_for "kube-apiserver /readyz" 120 kube-apiserver "$kbin/kubectl" get --raw /readyz
}

# --- up / down -------------------------------------------------------------------------

untainted() { [ -z "$("$1" get node "$NODE" -o jsonpath='{.spec.taints}')" ]; }

kbin_dir() {
  if [ -n "${GPUSLICE_KUBE_BIN:-}" ]; then echo "$GPUSLICE_KUBE_BIN"; else "$repo/scripts/kubernetes-build.sh"; fi
}

# check_ready_to_start CONTROL_PLANE_ONLY
check_ready_to_start() {
  local c tools=(etcd openssl curl)
  if [ "${1:-0}" -eq 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "must run as root (containers, mounts, device nodes)"
    tools+=(containerd runc ctr umoci skopeo /usr/lib/cni/loopback /bin/busybox)
  fi
  for c in "${tools[@]}"; do
    command -v "$c" >/dev/null || [ -x "$c" ] || die "'$c' is missing; run scripts/install-deps.sh e2e"
  done
  for c in $ETCD_PORT $ETCD_PEER_PORT $API_PORT $KUBELET_PORT $KUBELET_HEALTHZ $CM_PORT $SCHED_PORT $SCHED_HEALTHZ \
    $GPU_SCHED_PORT $GPU_SCHED_HEALTHZ; do
    port_free "$c" || die "127.0.0.1:$c is in use by another process (ss -ltnp | grep $c); a cluster of another checkout? stop it with its cluster.sh down"
  done
  [ "${1:-0}" -eq 0 ] || return 0 # no kubelet of ours: another one is no concern
  if [ -S "$KUBELET_ROOT/device-plugins/kubelet.sock" ] && [ ! -f "$D/created-kubelet-root" ]; then
    # A kubelet.sock of a kubelet that is not ours: a real node. Never take it over.
    if grep -qx kubelet /proc/[0-9]*/comm 2>/dev/null; then die "another kubelet runs on this machine (pgrep -x kubelet)"; fi
  fi
}

save_sysctls() {
  # Saved once per cluster: a second `up` must not record the kubelet's values as the
  # machine's.
  [ -f "$D/sysctl.saved" ] && return 0
  local s
  # Through /proc/sys: procps' sysctl is not on every minimal Debian.
  for s in "${SYSCTLS[@]}"; do echo "$s $(cat "/proc/sys/${s//.//}")"; done >"$D/sysctl.saved"
}

restore_sysctls() {
  local f=$D/sysctl.saved name value
  [ -f "$f" ] || return 0
  while read -r name value; do
    echo "$value" >"/proc/sys/${name//.//}" 2>/dev/null || log "could not restore $name=$value"
  done <"$f"
  rm -f "$f"
}

cmd_up() {
  local build=$repo/build/release extender="" control_plane=0
  while [ $# -gt 0 ]; do
    case $1 in
      --build) build=$(cd "$2" && pwd) && shift 2 ;;
      --extender) extender=$2 && shift 2 ;;
      --control-plane) control_plane=1 && shift ;;
      *) die "unknown flag $1" ;;
    esac
  done
  [ -x "$build/bin/gpuslice" ] || die "$build/bin/gpuslice not built (make build)"
  local kbin t0=$SECONDS
  kbin=$(kbin_dir) || die "no Kubernetes binaries (scripts/kubernetes-build.sh failed)"
  if [ -d "$D" ]; then
    log "a previous cluster's directory is there: taking it down first"
    cmd_down
  fi
  check_ready_to_start "$control_plane"
  mkdir -p "$D/logs" "$D/pids" "$D/images"
  # Processes recorded for `down` check that a pid still runs this program.
  echo "$kbin" >"$D/kbin"
  echo "$build" >"$D/build"
  if [ "$control_plane" -eq 1 ]; then
    # `down` then leaves the kubelet's paths, the kubepods cgroups and the sysctls alone:
    # nothing here touches them.
    touch "$D/control-plane"
    make_pki
    start_etcd
    wait_for "etcd health" 60 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
    # TaintNodesByCondition puts node.kubernetes.io/not-ready on every new Node, and only
    # the node lifecycle controller (below: not run) lifts it.
    start_apiserver "$kbin" --disable-admission-plugins=TaintNodesByCondition
    # No controller-manager: its node lifecycle controller would taint every Node that
    # has no kubelet behind it. Nor its service-account controller, so the one account
    # pods need is made here (the bench's pods mount no token).
    "$kbin/kubectl" -n default create serviceaccount default >/dev/null 2>&1 ||
      "$kbin/kubectl" -n default get serviceaccount default >/dev/null || die "no service account default/default"
    start_scheduler "$kbin" kube-scheduler
    start_scheduler "$kbin" gpu-scheduler "$extender"
    log "control plane up in $((SECONDS - t0)) s; eval \"\$($0 env)\" to use it"
    return 0
  fi
  save_sysctls
  make_pki

  write_containerd_config
  # containerd and its runc shims use /run/containerd/s whatever the state directory is.
  [ -d /run/containerd ] || touch "$D/created-run-containerd"
  log "containerd ($D/containerd/containerd.sock)"
  # Full paths: `running` matches a pid's command line against the program's name.
  start containerd "$(command -v containerd)" --config "$D/containerd/config.toml"
  wait_for "containerd's socket" 60 containerd ctr --address "$D/containerd/containerd.sock" version

  start_etcd

  make_images "$kbin" "$build" # containerd is up; the images import while etcd starts

  wait_for "etcd health" 60 etcd curl -sf "http://127.0.0.1:$ETCD_PORT/health"
  start_apiserver "$kbin"

  log "kube-controller-manager"
  start kube-controller-manager "$kbin/kube-controller-manager" --kubeconfig="$D/kubeconfig/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$D/kubeconfig/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$D/kubeconfig/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --secure-port=$CM_PORT --port=0 --leader-elect=false \
    --service-account-private-key-file="$D/pki/sa.key" --root-ca-file="$D/pki/ca.crt" \
    --use-service-account-credentials=true --v=1

  start_scheduler "$kbin" kube-scheduler
  start_scheduler "$kbin" gpu-scheduler "$extender"

  write_kubelet_config
  [ -d "$KUBELET_ROOT" ] || { mkdir -p "$KUBELET_ROOT" && touch "$D/created-kubelet-root"; }
  [ -d /var/log/pods ] || { mkdir -p /var/log/pods && touch "$D/created-var-log-pods"; }
  [ -d /var/log/containers ] || { mkdir -p /var/log/containers && touch "$D/created-var-log-containers"; }
  log "kubelet (node $NODE, 127.0.0.1:$KUBELET_PORT)"
  start kubelet "$kbin/kubelet" --config="$D/kubelet/config.yaml" --kubeconfig="$D/kubeconfig/kubelet.kubeconfig" \
    --container-runtime=remote --container-runtime-endpoint="unix://$D/containerd/containerd.sock" \
    --hostname-override="$NODE" --root-dir="$KUBELET_ROOT" \
    --pod-infra-container-image=k8s.gcr.io/pause:3.2 --v=2
  wait_for "kubelet healthz" 90 kubelet curl -sf "http://127.0.0.1:$KUBELET_HEALTHZ/healthz"
  wait_for "node $NODE Ready" 120 kubelet "$kbin/kubectl" wait --for=condition=Ready "node/$NODE" --timeout=5s
  # The node lifecycle controller lifts the not-ready taint a few seconds after Ready.
  wait_for "node $NODE without taints" 60 kube-controller-manager untainted "$kbin/kubectl"
  wait_for "service account default/default" 60 kube-controller-manager "$kbin/kubectl" -n default get serviceaccount default

  start_agent "$build"
  log "up in $((SECONDS - t0)) s; eval \"\$($0 env)\" to use it"
}

# The simulated GPUs and the node agent, as host processes, like the DaemonSet would run
# them: the agent registers with the kubelet's device-plugins/kubelet.sock, and every path
# its Allocate answers with (device nodes, enforcer, limits files) exists on this host.
start_agent() {
  local build=$1 gpus=${GPUSLICE_E2E_GPUS:-8} split=${GPUSLICE_E2E_SPLIT:-2} i
  mkdir -p "$D/sim"
  # Known, small cards: the test can compute every slice's limit. context_memory 0 keeps
  # the probe's memory arithmetic exact.
  {
    echo "context_memory: 0"
    echo "gpus:"
    for ((i = 0; i < gpus; i++)); do
      printf '  - {name: E2E card, memory: 8Gi, sms: 40, uuid: GPU-0e2e0000-0000-4000-8000-%012d}\n' "$i"
    done
  } >"$D/sim-scenario.yaml"
  log "gpuslice sim up ($gpus simulated 8 GiB cards in $D/sim)"
  "$build/bin/gpuslice" sim up --scenario "$D/sim-scenario.yaml" --root "$D/sim" --replace >"$D/logs/sim-up.log" 2>&1 ||
    {
      cat "$D/logs/sim-up.log" >&2
      die "gpuslice sim up failed"
    }
  [ -c "$D/sim/dev/nvidia0" ] || die "$D/sim/dev/nvidia0 is not a character device: containerd cannot pass it to a container"
  log "gpuslice node (split $split, kubelet $KUBELET_ROOT)"
  run_agent "$build" --device-split-count "$split"
}

# run_agent BUILD FLAGS...: (re)starts the node agent on the simulated node with FLAGS
# added (a later flag wins over an earlier one).
run_agent() {
  local build=$1
  shift
  stop gpuslice-node
  start gpuslice-node "$build/bin/gpuslice" node --driver-root "$D/sim" --kubelet-dir "$KUBELET_ROOT" \
    --state-dir "$D/gpuslice-state" --metrics-addr 127.0.0.1:0 --cdi-spec-dir "" \
    --enforcer "$build/enforcer/libgpuslice.so" "$@"
}

# Kills what containerd started for the kubelet (containers, shims) while containerd still
# answers, so no mount or process outlives `down`.
stop_containers() {
  local sock=$D/containerd/containerd.sock id pid
  running containerd || return 0
  for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$sock" -n k8s.io tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true
  done
  for id in $(ctr --address "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
    ctr --address "$sock" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
  done
  stop containerd
  # The runc shims outlive containerd by design. Ours are the ones started with our
  # socket's address: stop those by pid.
  { grep -lsF -- "$sock" /proc/[0-9]*/cmdline 2>/dev/null || true; } | cut -d/ -f3 | while read -r pid; do
    if grep -qF containerd-shim "/proc/$pid/cmdline" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  done
}

unmount_under() {
  local dir=$1 m
  # Deepest first; -l because a dying container may still hold one for a moment.
  awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
}

remove_kubepods_cgroups() {
  local c pid i
  # Containers whose shim died with containerd (a crashed run): everything in the kubepods
  # cgroups was started by our kubelet (up refuses to start beside another one).
  for ((i = 0; i < 50; i++)); do
    c=$(cat /sys/fs/cgroup/pids/kubepods/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/cgroup.procs \
      /sys/fs/cgroup/pids/kubepods/*/*/cgroup.procs /sys/fs/cgroup/pids/kubepods/*/*/*/cgroup.procs 2>/dev/null || true)
    [ -n "$c" ] || break
    for pid in $c; do kill -KILL "$pid" 2>/dev/null || true; done
    sleep 0.1
  done
  for c in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/*/kubepods.slice; do
    [ -d "$c" ] || continue
    find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
  done
}

cmd_down() {
  [ -d "$D" ] || return 0
  log "down: stopping what $D/pids records"
  local n
  # gpuslice-scheduler: the extender tests/e2e/run.sh starts, recorded here.
  for n in gpuslice-scheduler gpuslice-node kubelet; do stop "$n"; done
  stop_containers
  for n in gpu-scheduler kube-scheduler kube-controller-manager kube-apiserver etcd; do stop "$n"; done
  if [ -x "$(cat "$D/build" 2>/dev/null)/bin/gpuslice" ] && [ -d "$D/sim" ]; then
    "$(cat "$D/build")/bin/gpuslice" sim down --root "$D/sim" >/dev/null 2>&1 || true
  fi
  if [ ! -f "$D/control-plane" ]; then # a control plane never touched these
    unmount_under "$KUBELET_ROOT"
    unmount_under "$D"
    remove_kubepods_cgroups
    restore_sysctls
  fi
  [ -f "$D/created-kubelet-root" ] && rm -rf --one-file-system "$KUBELET_ROOT"
  [ -f "$D/created-var-log-pods" ] && rm -rf --one-file-system /var/log/pods
  [ -f "$D/created-var-log-containers" ] && rm -rf --one-file-system /var/log/containers
  # Only if empty: another containerd may have put its own sockets there meanwhile.
  [ ! -f "$D/created-run-containerd" ] || rmdir /run/containerd/s /run/containerd 2>/dev/null || true
  rm -rf --one-file-system "$D"
}

cmd_env() {
  local kbin
  kbin=$(cat "$D/kbin" 2>/dev/null) || die "no cluster in $D (run: $0 up)"
  echo "export KUBECONFIG=$D/kubeconfig/admin.kubeconfig"
  echo "export PATH=$kbin:\$PATH"
  echo "export GPUSLICE_E2E_DIR=$D GPUSLICE_E2E_NODE=$NODE GPUSLICE_E2E_SCHEDULER_NAME=$GPU_SCHEDULER_NAME"
}

case ${1:-} in
  up) shift && cmd_up "$@" ;;
  down) cmd_down ;;
  env) cmd_env ;;
  agent)
    [ -f "$D/build" ] || die "no cluster in $D (run: $0 up)"
    shift
    log "gpuslice node restarted with: $*"
    run_agent "$(cat "$D/build")" "$@"
    ;;
  gpu-scheduler)
    [ -f "$D/kbin" ] || die "no cluster in $D (run: $0 up)"
    ext=${2:-}
    [ "$ext" != none ] || ext=""
    start_scheduler "$(cat "$D/kbin")" gpu-scheduler "$ext"
    ;;
  *)
    echo "usage: $0 up [--build DIR] [--extender URL] [--control-plane] | agent [FLAGS...] | gpu-scheduler [EXTENDER_URL] | env | down" >&2
    exit 2
    ;;
esac
