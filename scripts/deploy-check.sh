#!/usr/bin/env bash
# The Helm charts proved (docs/deploy.md, "How the charts are proved"): helm lint and helm template
# of both charts with every value set of their ci/ folders, the values schemas refusing bad values,
# a server-side dry run of everything rendered on a real kube-apiserver (kube_testenv), the target
# chart applied for real and its ServiceAccount's rights checked by impersonation (kubectl auth
# can-i --as), then the portal's push as that ServiceAccount (tests/deploy).
#
#   scripts/deploy-check.sh                 everything
#   scripts/deploy-check.sh --charts-only   without the pytest part (make test runs tests/deploy with the suite)
#
# Needs helm (make helm) and the test control plane (make kube-testenv); make deploy-check builds both.
set -euo pipefail
cd "$(dirname "$0")/.."

charts_only=0
[ "${1:-}" = "--charts-only" ] && charts_only=1

HELM=${GPUPORTAL_HELM:-.cache/helm/v3.22.0/bin/helm}
KUBE_BIN=${GPUPORTAL_KUBE_BIN:-.cache/kube-testenv/v1.36.3/bin}
KUBECTL=$KUBE_BIN/kubectl
PORTAL=deploy/helm/gpu-portal
TARGET=deploy/helm/gpu-portal-target
for tool in "$HELM" "$KUBECTL"; do
  [ -x "$tool" ] || { echo "deploy-check: $tool is missing: run make helm kube-testenv" >&2; exit 2; }
done

work=$(mktemp -d)
testenv_pid=""
cleanup() {
  if [ -n "$testenv_pid" ]; then kill "$testenv_pid" 2>/dev/null || true; wait "$testenv_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "deploy-check: FAILED: $*" >&2; exit 1; }

echo "== helm lint and template"
for chart in "$PORTAL" "$TARGET"; do
  name=$(basename "$chart")
  for values in "$chart"/ci/*-values.yaml; do
    set_name=$(basename "$values" -values.yaml)
    "$HELM" lint --strict "$chart" --namespace gpuportal --values "$values" >"$work/lint.log" 2>&1 \
      || { cat "$work/lint.log"; fail "helm lint $name with $set_name"; }
    "$HELM" template "dc-$set_name" "$chart" --namespace "dc-$name-$set_name" --values "$values" \
      >"$work/$name--$set_name.yaml" 2>"$work/template.log" \
      || { cat "$work/template.log"; fail "helm template $name with $set_name"; }
    echo "   $name / $set_name: $(grep -c '^kind:' "$work/$name--$set_name.yaml") objects"
  done
done

echo "== the values schemas refuse bad values"
refused() {  # chart, what it must say, helm arguments...
  local chart=$1 expect=$2; shift 2
  if "$HELM" template bad "$chart" "$@" >/dev/null 2>"$work/refused.log"; then fail "helm accepted $chart $*"; fi
  grep -q -- "$expect" "$work/refused.log" || { cat "$work/refused.log"; fail "$chart $*: no '$expect' in the refusal"; }
  echo "   refused: $(basename "$chart") $*"
}
minimal=$PORTAL/ci/minimal-values.yaml
refused "$PORTAL" "want integer" -f "$minimal" --set web.replicas=two
refused "$PORTAL" "additional properties" -f "$minimal" --set web.replica=2
refused "$PORTAL" "/secrets/brokerUrl" -f "$minimal" --set secrets.brokerUrl=http://redis:6379
refused "$PORTAL" "/networkPolicy/egress/database" -f "$minimal" --set 'networkPolicy.egress.database.ports[0].protocol=ICMP'
refused "$PORTAL" "/config/logLevel" -f "$minimal" --set config.logLevel=chatty
refused "$PORTAL" "secrets.secretKey is required"
refused "$PORTAL" "needs a metrics token" -f "$minimal" --set serviceMonitor.enabled=true
refused "$TARGET" "/admissionPolicy/validationActions" --set 'admissionPolicy.validationActions={Block}'
refused "$TARGET" "want boolean" --set features.volcano=yes
refused "$TARGET" "/tenantRoles" --set 'tenantRoles={}'

echo "== a real kube-apiserver"
.venv/bin/python -u -m kube_testenv up >"$work/testenv.log" 2>&1 &
testenv_pid=$!
for _ in $(seq 1 120); do
  grep -q '^kubeconfig:' "$work/testenv.log" && break
  kill -0 "$testenv_pid" 2>/dev/null || { cat "$work/testenv.log"; fail "the test control plane did not start"; }
  sleep 1
done
KUBECONFIG=$(sed -n 's/^kubeconfig: //p' "$work/testenv.log")
[ -n "$KUBECONFIG" ] || { cat "$work/testenv.log"; fail "the test control plane did not start in time"; }
export KUBECONFIG
"$KUBECTL" version 2>/dev/null | sed 's/^/   /'
"$KUBECTL" apply --server-side -f tests/deploy/crds/servicemonitors.yaml >/dev/null
"$KUBECTL" wait --for=condition=Established --timeout=60s crd/servicemonitors.monitoring.coreos.com >/dev/null
for _ in $(seq 1 30); do  # established is not yet served: the API server may answer 404 or 429 for a moment
  "$KUBECTL" get servicemonitors --all-namespaces >/dev/null 2>&1 && break
  sleep 1
done

echo "== server-side dry run of every rendered value set"
for rendered in "$work"/*--*.yaml; do
  set_id=$(basename "$rendered" .yaml)
  name=${set_id%%--*}; set_name=${set_id#*--}
  namespace="dc-$name-$set_name"
  "$KUBECTL" create namespace "$namespace" >/dev/null
  "$KUBECTL" apply --server-side --dry-run=server --namespace "$namespace" -f "$rendered" >"$work/apply.log" 2>&1 \
    || { cat "$work/apply.log"; fail "server-side dry run of $name with $set_name"; }
  echo "   $name / $set_name: $(wc -l <"$work/apply.log") objects accepted"
done

echo "== the target chart applied, its ServiceAccount's rights (kubectl auth can-i --as)"
"$KUBECTL" apply --server-side --namespace dc-gpu-portal-target-everything \
  -f "$work/gpu-portal-target--everything.yaml" >/dev/null
as=system:serviceaccount:dc-gpu-portal-target-everything:dc-everything-gpu-portal-target
can() {  # expected answer, verb, resource [--subresource=...] [-n ...]
  local expected=$1; shift
  local answer
  answer=$("$KUBECTL" auth can-i "$@" --as="$as" 2>/dev/null || true)
  [ "$answer" = "$expected" ] || fail "can-i $* as the portal: $answer, expected $expected"
  printf '   %-3s %s\n' "$answer" "$*"
}
can yes create namespaces
can yes patch resourcequotas -n any-tenant
can yes delete rolebindings -n any-tenant
can yes patch nodes
can yes bind clusterroles/edit
can yes bind clusterroles/gpuportal-evictor
# Pods: nowhere across the cluster; in a namespace the portal manages once it has bound the evictor
# role to itself there (as its push does, delivery/drivers/kube_identity.py), never in kube-system.
can no list pods -A
can no get pods -A
can no list pods -n any-tenant
can no create pods --subresource=eviction -n any-tenant
can no list events -A
can no list events -n any-tenant
sa_namespace=${as#system:serviceaccount:}; sa_name=${sa_namespace#*:}; sa_namespace=${sa_namespace%%:*}
evictor_binding() {  # namespace, subject kind, subject name, subject namespace
  cat <<YAML
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: gpuportal-evictor, namespace: $1, labels: {app.kubernetes.io/managed-by: gpuportal}}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: gpuportal-evictor}
subjects: [{kind: $2, name: $3, namespace: $4}]
YAML
}
"$KUBECTL" create namespace dc-tenant >/dev/null
"$KUBECTL" label namespace dc-tenant app.kubernetes.io/managed-by=gpuportal >/dev/null
evictor_binding dc-tenant ServiceAccount "$sa_name" "$sa_namespace" \
  | "$KUBECTL" apply --server-side --field-manager=gpuportal -f - --as="$as" >"$work/bind.log" 2>&1 \
  || { cat "$work/bind.log"; fail "the portal could not bind gpuportal-evictor to itself in a namespace it manages"; }
echo "   the portal bound gpuportal-evictor to itself in dc-tenant"
for _ in $(seq 1 30); do  # the authorizer sees a new binding a moment later
  [ "$("$KUBECTL" auth can-i list pods -n dc-tenant --as="$as" 2>/dev/null || true)" = yes ] && break
  sleep 1
done
can yes list pods -n dc-tenant
can yes create pods --subresource=eviction -n dc-tenant
can yes list events -n dc-tenant
can no list pods -n kube-system
can no list events -n kube-system
can no create pods --subresource=eviction -n kube-system
refused_binding() {  # what it tries, then the YAML on stdin
  if "$KUBECTL" apply --server-side --field-manager=gpuportal -f - --as="$as" >"$work/bind.log" 2>&1; then
    fail "the portal could $1"
  fi
  grep -qi forbidden "$work/bind.log" || { cat "$work/bind.log"; fail "$1: refused, but not as forbidden"; }
  echo "   refused: $1 ($(grep -oi -m1 'the GPU portal may only [a-z ]*\|cannot [a-z ]*' "$work/bind.log" | head -1))"
}
# The admission policy applied a moment ago is enforced once the API server has compiled it (a few
# seconds on a loaded machine): wait until a dry run is refused, then check the real request.
for _ in $(seq 1 30); do
  evictor_binding kube-system ServiceAccount "$sa_name" "$sa_namespace" \
    | "$KUBECTL" apply --server-side --dry-run=server --field-manager=gpuportal -f - --as="$as" >/dev/null 2>&1 || break
  sleep 1
done
evictor_binding kube-system ServiceAccount "$sa_name" "$sa_namespace" | refused_binding "bind gpuportal-evictor in kube-system"
evictor_binding dc-tenant ServiceAccount default "$sa_namespace" | refused_binding "bind gpuportal-evictor to another ServiceAccount"
can yes patch validatingadmissionpolicies/gpuportal-tenant-pools
can no get secrets -A
can no list secrets -n kube-system
can no create pods -n any-tenant
can no delete pods -n any-tenant
can no create pods --subresource=exec -n any-tenant
can no bind clusterroles/cluster-admin
can no escalate clusterroles
can no impersonate users
can no impersonate serviceaccounts
can no create nodes
can no delete nodes
can no patch validatingadmissionpolicies/dc-everything-gpu-portal-target
can no create clusterrolebindings
can no create customresourcedefinitions.apiextensions.k8s.io

if [ "$charts_only" = 0 ]; then
  echo "== the portal's push as the target chart's ServiceAccount (tests/deploy)"
  kill "$testenv_pid"; wait "$testenv_pid" 2>/dev/null || true; testenv_pid=""
  GPUPORTAL_HELM=$HELM GPUPORTAL_REQUIRE_HELM=1 GPUPORTAL_REQUIRE_KUBE=1 GPUPORTAL_DEBUG=true \
    .venv/bin/python -m pytest -q -p no:cacheprovider tests/deploy
fi
echo "deploy-check: passed"
