# Real Kubernetes control plane for tests (see docs/kube-testenv.md).
#
# Included by the top-level Makefile; also usable alone:
#   make -f tools/kube-testenv.mk kube-testenv
#
# Builds upstream kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl (tools/kubetest) and etcd (tools/etcd) from the Go module proxy into
# the git-ignored .cache/kube-testenv/<version>/bin/. A stamp file named after
# the pinned versions makes the target a no-op once the binaries exist; Go's
# own build and module caches make a rebuild after a go.mod/go.sum change fast.
# The kwok controller (tools/kwok), which runs the fake GPU nodes' pods, is built
# the same way into .cache/kwok/<version>/bin/ with its own stamp.

KUBE_TESTENV_VERSION      := v1.36.3
KUBE_TESTENV_ETCD_VERSION := v3.6.8
# A bump also changes KWOK_VERSION in kube_testenv/paths.py.
KWOK_VERSION              := v0.8.0

# Paths are derived from this file's location so the fragment works from any
# including Makefile and never embeds a machine-specific path.
KUBE_TESTENV_TOOLS := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
KUBE_TESTENV_ROOT  := $(patsubst %/,%,$(dir $(KUBE_TESTENV_TOOLS)))
KUBE_TESTENV_BIN   := $(KUBE_TESTENV_ROOT)/.cache/kube-testenv/$(KUBE_TESTENV_VERSION)/bin
KUBE_TESTENV_STAMP := $(KUBE_TESTENV_BIN)/.stamp-$(KUBE_TESTENV_VERSION)-etcd-$(KUBE_TESTENV_ETCD_VERSION)
KWOK_BIN           := $(KUBE_TESTENV_ROOT)/.cache/kwok/$(KWOK_VERSION)/bin
KWOK_STAMP         := $(KWOK_BIN)/.stamp-$(KWOK_VERSION)

# Lower priority so a cold build (6-15 min on 2 cores, plus about 3 min for kwok) does not starve others.
KUBE_TESTENV_NICE ?= nice -n 10
KUBE_TESTENV_GO   ?= go

# Static, trimmed binaries like upstream's release builds. GOTOOLCHAIN=local
# never downloads another toolchain; -mod=readonly builds exactly what
# go.mod/go.sum pin.
KUBE_TESTENV_GOENV := CGO_ENABLED=0 GOTOOLCHAIN=local
KUBE_TESTENV_GOBUILD := $(KUBE_TESTENV_NICE) $(KUBE_TESTENV_GO) build -mod=readonly -trimpath

# Without these stamps /version reports v0.0.0-master+$Format:%H$.
KUBE_TESTENV_MINOR := $(word 2,$(subst ., ,$(KUBE_TESTENV_VERSION)))
KUBE_TESTENV_LDFLAGS := -s -w $(foreach pkg,k8s.io/component-base/version k8s.io/client-go/pkg/version,\
	-X $(pkg).gitVersion=$(KUBE_TESTENV_VERSION) \
	-X $(pkg).gitMajor=1 \
	-X $(pkg).gitMinor=$(KUBE_TESTENV_MINOR) \
	-X $(pkg).gitTreeState=clean)

KUBE_TESTENV_KUBE_CMDS := kube-apiserver kube-controller-manager kube-scheduler kubectl

.PHONY: kube-testenv kube-testenv-clean kwok

## kube-testenv: build the test control-plane binaries (and kwok) unless already built.
kube-testenv: $(KUBE_TESTENV_STAMP) $(KWOK_STAMP)

## kwok: build only the kwok controller unless already built.
kwok: $(KWOK_STAMP)

# kwok stamps its version into sigs.k8s.io/kwok/pkg/consts as its release script does.
$(KWOK_STAMP): $(KUBE_TESTENV_TOOLS)/kwok/go.mod $(KUBE_TESTENV_TOOLS)/kwok/go.sum
	@mkdir -p $(KWOK_BIN)
	@rm -f $(KWOK_BIN)/.stamp-*
	@echo "kube-testenv: building kwok $(KWOK_VERSION) into $(KWOK_BIN) (cold: about 2 min on 2 idle cores)"
	cd $(KUBE_TESTENV_TOOLS)/kwok && $(KUBE_TESTENV_GOENV) $(KUBE_TESTENV_GOBUILD) \
		-ldflags '-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$(KWOK_VERSION)' \
		-o $(KWOK_BIN)/kwok sigs.k8s.io/kwok/cmd/kwok
	$(KWOK_BIN)/kwok --version | grep -q '$(KWOK_VERSION)'
	@echo "kwok=$(KWOK_VERSION)" > $@

$(KUBE_TESTENV_STAMP): $(KUBE_TESTENV_TOOLS)/kubetest/go.mod $(KUBE_TESTENV_TOOLS)/kubetest/go.sum \
		$(KUBE_TESTENV_TOOLS)/etcd/go.mod $(KUBE_TESTENV_TOOLS)/etcd/go.sum
	@mkdir -p $(KUBE_TESTENV_BIN)
	@rm -f $(KUBE_TESTENV_BIN)/.stamp-*
	@echo "kube-testenv: building etcd $(KUBE_TESTENV_ETCD_VERSION) into $(KUBE_TESTENV_BIN)"
	cd $(KUBE_TESTENV_TOOLS)/etcd && $(KUBE_TESTENV_GOENV) $(KUBE_TESTENV_GOBUILD) \
		-ldflags '-s -w' -o $(KUBE_TESTENV_BIN)/etcd go.etcd.io/etcd/server/v3
	@echo "kube-testenv: building Kubernetes $(KUBE_TESTENV_VERSION) (cold: about 6 min on 2 idle cores)"
	cd $(KUBE_TESTENV_TOOLS)/kubetest && $(KUBE_TESTENV_GOENV) $(KUBE_TESTENV_GOBUILD) \
		-ldflags '$(KUBE_TESTENV_LDFLAGS)' -o $(KUBE_TESTENV_BIN)/ \
		$(addprefix k8s.io/kubernetes/cmd/,$(KUBE_TESTENV_KUBE_CMDS))
	$(KUBE_TESTENV_BIN)/kube-apiserver --version | grep -qx 'Kubernetes $(KUBE_TESTENV_VERSION)'
	@echo "kubernetes=$(KUBE_TESTENV_VERSION) etcd=$(KUBE_TESTENV_ETCD_VERSION)" > $@
	@echo "kube-testenv: ready in $(KUBE_TESTENV_BIN)"

## kube-testenv-clean: remove the built binaries (Go caches are kept).
kube-testenv-clean:
	rm -rf $(KUBE_TESTENV_ROOT)/.cache/kube-testenv $(KUBE_TESTENV_ROOT)/.cache/kwok
