# nvcheck: checks the device-plugin and mig-parted configs the portal renders (docs/clusters.md).
#
# Included by the top-level Makefile; also usable alone:
#   make -f tools/nvcheck.mk nvcheck
# Builds tools/nvcheck into the git-ignored .cache/nvcheck/. go-nvml (under go-nvlib) needs cgo;
# nothing calls NVML, so no driver is needed at run time.

NVCHECK_TOOLS := $(patsubst %/,%,$(dir $(abspath $(lastword $(MAKEFILE_LIST)))))
NVCHECK_ROOT  := $(patsubst %/,%,$(dir $(NVCHECK_TOOLS)))
NVCHECK_BIN   := $(NVCHECK_ROOT)/.cache/nvcheck/nvcheck
NVCHECK_GO    ?= go

.PHONY: nvcheck

## nvcheck: build the NVIDIA config checker unless already built.
nvcheck: $(NVCHECK_BIN)

$(NVCHECK_BIN): $(NVCHECK_TOOLS)/nvcheck/go.mod $(NVCHECK_TOOLS)/nvcheck/go.sum $(NVCHECK_TOOLS)/nvcheck/main.go
	@mkdir -p $(dir $@)
	cd $(NVCHECK_TOOLS)/nvcheck && CGO_ENABLED=1 GOTOOLCHAIN=local nice -n 10 $(NVCHECK_GO) build -mod=readonly -trimpath -o $@ .
