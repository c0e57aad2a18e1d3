#!/usr/bin/env bash
# `make release`: what a release publishes, built reproducibly into dist/ (git-ignored):
#
#   hap-operator-<v>.oci.tar            the image (scripts/image.sh: built twice, same digest)
#   image.digest                        its manifest digest (sha256:…), read from the archive
#   hap-operator-<v>.tgz                the Helm chart; its values.yaml pins image.digest
#   hap-operator-<v>-crds.yaml          the CRDs (crds/accountpool.io.yaml)
#   hap-operator-<v>-kustomize.tar.gz   deploy/kustomize plus overlays/release (the image by digest)
#   hap-operator-<v>-install.yaml       overlays/release rendered: `kubectl apply -f` installs it
#   SHA256SUMS                          sha256sum of all the above
#
# Every timestamp is SOURCE_DATE_EPOCH (default: the last commit's time), archives are sorted,
# owned by 0:0 and gzip'ed without a name or time: the same commit gives byte-identical files.
# The chart, the kustomize tree, the CRDs and LICENSE come from HEAD (`git archive`), and a work
# tree with uncommitted or untracked changes is refused before anything is built: a release is
# a commit, not whatever files lie in deploy/.
#
#   scripts/release.sh [--out DIR] [--image-archive FILE]
#
# --image-archive reuses an image archive scripts/image.sh built (make test passes its own);
# without it scripts/image.sh builds one. Prints the output directory on stdout; progress and the
# time taken go to stderr.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out="$root/dist"
archive=""
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --image-archive) archive=$2; shift 2 ;;
    *) echo "release: unknown argument $1 (usage: scripts/release.sh [--out DIR] [--image-archive FILE])" >&2; exit 2 ;;
  esac
done
if ! dirty=$(git status --porcelain 2>&1); then
  echo "release: $root is not a git work tree ($dirty); a release is built from a commit" >&2
  exit 1
fi
if [ -n "$dirty" ]; then
  {
    echo "release: refusing to release from a work tree with changes not in HEAD (git status --porcelain):"
    echo "$dirty" | head -20 | sed 's/^/  /'
    echo "A release is built from HEAD: commit or remove these changes, or release from a clean checkout."
  } >&2
  exit 1
fi
start=$(date +%s)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}"
export TZ=UTC LC_ALL=C
helm=${HAP_HELM:-$(e2e/build-helm.sh)}
# kubectl of the pinned Kubernetes release (e2e/build-control-plane.sh, cached), so that the
# rendered install.yaml does not depend on whichever kubectl a machine has.
kubectl=${KUBECTL:-$(e2e/build-control-plane.sh)/kubectl}

if [ -z "$archive" ]; then
  archive=$(scripts/image.sh)
fi
# The manifest digest a registry and containerd report for this image: the archive's index
# names exactly one manifest.
digest=$(tar -xOf "$archive" index.json | jq -r '.manifests | if length == 1 then .[0].digest else error("\(length) manifests") end')
if ! [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]]; then
  echo "release: $archive: no single manifest digest in index.json (got '$digest')" >&2
  exit 1
fi

stage=$(mktemp -d "${TMPDIR:-/tmp}/hap-release.XXXXXX")
trap 'rm -rf "$stage"' EXIT
files="$stage/files"
mkdir -p "$files"

# What the release ships of the tree, exactly as committed.
src="$stage/src"
mkdir -p "$src"
git archive --format=tar HEAD deploy crds LICENSE | tar -x -C "$src"

# deterministic_tgz DIR NAME OUT: DIR/NAME as a reproducible .tar.gz.
deterministic_tgz() {
  tar -C "$1" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
    --mode='u+rwX,go+rX,go-w' -cf - "$2" | gzip -9 -n >"$3"
}

# --- image -------------------------------------------------------------------------------------
cp "$archive" "$files/hap-operator-$version.oci.tar"
echo "$digest" >"$files/image.digest"

# --- CRDs --------------------------------------------------------------------------------------
cp "$src/crds/accountpool.io.yaml" "$files/hap-operator-$version-crds.yaml"

# --- Helm chart: the default values pin the image built with it --------------------------------
mv "$src/deploy/helm/hap-operator" "$stage/chart"
cp "$src/LICENSE" "$stage/chart/LICENSE"
values="$stage/chart/values.yaml"
if [ "$(grep -c '^  digest: ""$' "$values")" != 1 ]; then
  echo "release: deploy/helm/hap-operator/values.yaml (HEAD): expected exactly one line '  digest: \"\"' (image.digest)" >&2
  exit 1
fi
sed -i "s|^  digest: \"\"$|  digest: \"$digest\"|" "$values"
"$helm" lint --strict "$stage/chart" >/dev/null
"$helm" package "$stage/chart" -d "$stage/package" >/dev/null
mv "$stage/package/hap-operator-$version.tgz" "$files/hap-operator-$version.tgz"

# --- kustomize: the tree plus an overlay that pins the image by digest --------------------------
kdir="$stage/hap-operator-kustomize-$version"
mv "$src/deploy/kustomize" "$kdir"
cp "$src/LICENSE" "$kdir/LICENSE"
mkdir -p "$kdir/overlays/release"
cat >"$kdir/overlays/release/kustomization.yaml" <<EOF
# hap-operator $version as released: the base, the image by its digest.
#   kubectl apply -k overlays/release     (or use it as a base of your own overlay)
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - ../../base
images:
  - name: ghcr.io/hap-operator/hap-operator
    digest: $digest
EOF
deterministic_tgz "$stage" "hap-operator-kustomize-$version" "$files/hap-operator-$version-kustomize.tar.gz"
"$kubectl" kustomize "$kdir/overlays/release" >"$files/hap-operator-$version-install.yaml"
if ! grep -q "image: ghcr.io/hap-operator/hap-operator@$digest" "$files/hap-operator-$version-install.yaml"; then
  echo "release: overlays/release does not pin the image to $digest" >&2
  exit 1
fi

# --- checksums, then into place ------------------------------------------------------------------
(cd "$files" && find . -maxdepth 1 -type f -printf '%f\n' | sort | xargs sha256sum) >"$stage/SHA256SUMS"
mv "$stage/SHA256SUMS" "$files/SHA256SUMS"
mkdir -p "$out"
while read -r f; do
  rm -f "$out/$f"
done < <(cd "$files" && ls)
mv "$files"/* "$out/"
echo "release: hap-operator $version (image $digest) in $out, $(( $(date +%s) - start ))s" >&2
echo "$out"
