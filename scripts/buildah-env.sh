# Sourced by scripts/image.sh and scripts/testhelper-image.sh: buildah with configuration and
# storage of its own under $cache/containers (runc, the machine's hard ulimits, no registries),
# so nothing of the host's container setup is read or changed, and no bridge or iptables rule is
# created. Needs $cache; sets $conf and exports the CONTAINERS_* variables.
conf="$cache/containers"
mkdir -p "$conf/storage" "$conf/run" "$conf/net.d"
nofile=$(ulimit -Hn); nproc=$(ulimit -Hu)
[ "$nofile" = unlimited ] && nofile=1048576
[ "$nproc" = unlimited ] && nproc=1048576
cat >"$conf/containers.conf" <<EOF
# Written by scripts/buildah-env.sh. crun refuses this kind of host's hybrid cgroups; runc works.
# Default ulimits above the hard limits fail with EPERM, so they are the hard limits.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]
netns = "none"
[engine]
runtime = "runc"
# Network state under the cache too (the defaults create /run/containers/networks on the host).
[network]
network_backend = "cni"
network_config_dir = "$conf/net.d"
EOF
cat >"$conf/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$conf/storage"
runroot = "$conf/run"
EOF
cat >"$conf/registries.conf" <<EOF
# No registry is searched or pulled from: the images are FROM scratch.
unqualified-search-registries = []
EOF
cat >"$conf/policy.json" <<EOF
{"default": [{"type": "reject"}],
 "transports": {
   "containers-storage": {"": [{"type": "insecureAcceptAnything"}]},
   "oci-archive": {"": [{"type": "insecureAcceptAnything"}]}}}
EOF
export CONTAINERS_CONF="$conf/containers.conf"
export CONTAINERS_STORAGE_CONF="$conf/storage.conf"
export CONTAINERS_REGISTRIES_CONF="$conf/registries.conf"
# buildah 1.28 keeps a blob-info cache in /var/lib/containers/cache whatever its configuration
# says; the caller removes it again when it was not there before (see blob_cache_was_there).
blob_cache_was_there=no
if [ -e /var/lib/containers ]; then blob_cache_was_there=yes; fi
