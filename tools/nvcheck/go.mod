// Checks the device-plugin and mig-parted configs the portal renders. MIG profile names go
// through NVIDIA's own parser (go-nvlib, which mig-parted calls); the configs' structure through
// strict decoding against the documented v1 fields. See docs/clusters.md, "NVIDIA parser checks".
module gpuportal/tools/nvcheck

go 1.26.0

require (
	github.com/NVIDIA/go-nvlib v0.13.0
	sigs.k8s.io/yaml v1.6.0
)

require (
	github.com/NVIDIA/go-nvml v0.13.4-1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.yaml.in/yaml/v2 v2.4.2 // indirect
)
