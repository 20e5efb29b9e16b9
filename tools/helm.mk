# Helm for the chart checks (docs/deploy.md, "How the charts are proved").
#
# Included by the top-level Makefile; also usable alone:
#   make -f tools/helm.mk helm
#   make -f tools/helm.mk deploy-check
#
# Builds upstream helm (helm.sh/helm/v3, pinned by tools/helm/go.mod and go.sum) from the Go module
# proxy into the git-ignored .cache/helm/<version>/bin/helm, like the test control plane's binaries
# (tools/kube-testenv.mk): a stamp named after the version makes the target a no-op once built.
# Cold: about 2.5 min on 2 shared cores (module cache warm); Go's caches make a rebuild fast.

# A bump also changes the default path in scripts/deploy-check.sh and tests/deploy/charts.py.
HELM_VERSION := v3.22.0
# helm's own Makefile stamps the Kubernetes version of its client-go (k8s.io/client-go v0.37.0).
HELM_K8S_MINOR := 37

HELM_TOOLS := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
HELM_ROOT  := $(patsubst %/,%,$(dir $(HELM_TOOLS)))
HELM_BIN   := $(HELM_ROOT)/.cache/helm/$(HELM_VERSION)/bin
HELM       := $(HELM_BIN)/helm
HELM_STAMP := $(HELM_BIN)/.stamp-$(HELM_VERSION)

HELM_NICE ?= nice -n 10
HELM_GO   ?= go
HELM_LDFLAGS := -s -w \
	-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
	$(foreach pkg,helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil,\
		-X $(pkg).k8sVersionMajor=1 -X $(pkg).k8sVersionMinor=$(HELM_K8S_MINOR))

.PHONY: helm helm-clean deploy-check

## helm: build the pinned helm unless already built.
helm: $(HELM_STAMP)

$(HELM_STAMP): $(HELM_TOOLS)/helm/go.mod $(HELM_TOOLS)/helm/go.sum
	@mkdir -p $(HELM_BIN)
	@rm -f $(HELM_BIN)/.stamp-*
	@echo "helm: building $(HELM_VERSION) into $(HELM_BIN) (cold: about 2.5 min)"
	cd $(HELM_TOOLS)/helm && CGO_ENABLED=0 GOTOOLCHAIN=local $(HELM_NICE) $(HELM_GO) build -mod=readonly -trimpath \
		-ldflags '$(HELM_LDFLAGS)' -o $(HELM) helm.sh/helm/v3/cmd/helm
	$(HELM) version --template '{{.Version}}' | grep -qx '$(HELM_VERSION)'
	@echo "helm=$(HELM_VERSION)" > $@

## helm-clean: remove the built binary (Go caches are kept).
helm-clean:
	rm -rf $(HELM_ROOT)/.cache/helm

## deploy-check: lint and render both charts with several value sets, check the values schemas
## refuse bad values, apply everything with a server-side dry run on a real kube-apiserver, then
## push a full tenant as the target chart's ServiceAccount (tests/deploy).
deploy-check: venv helm kube-testenv
	GPUPORTAL_HELM=$(HELM) $(HELM_ROOT)/scripts/deploy-check.sh
