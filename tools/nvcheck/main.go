// Command nvcheck loads the ConfigMaps the portal renders and checks every config in them as the
// NVIDIA components would read it. Usage: nvcheck FILE.yaml... (exit 1 and one line per problem).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"sort"

	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"sigs.k8s.io/yaml"
)

type configMap struct {
	Kind     string                `json:"kind"`
	Metadata struct{ Name string } `json:"metadata"`
	Data     map[string]string     `json:"data"`
}

// The device plugin's config file v1, as documented (api/config/v1): unknown fields are errors here.
type pluginConfig struct {
	Version string `json:"version"`
	Flags   struct {
		MigStrategy     *string `json:"migStrategy,omitempty"`
		FailOnInitError *bool   `json:"failOnInitError,omitempty"`
		MpsRoot         *string `json:"mpsRoot,omitempty"`
	} `json:"flags"`
	Sharing struct {
		TimeSlicing *replicated `json:"timeSlicing,omitempty"`
		MPS         *replicated `json:"mps,omitempty"`
	} `json:"sharing"`
}

type replicated struct {
	RenameByDefault            bool  `json:"renameByDefault"`
	FailRequestsGreaterThanOne *bool `json:"failRequestsGreaterThanOne,omitempty"`
	Resources                  []struct {
		Name     string `json:"name"`
		Replicas int    `json:"replicas"`
	} `json:"resources"`
}

type migSpec struct {
	Version    string                     `json:"version"`
	MigConfigs map[string][]migConfigSpec `json:"mig-configs"`
}

type migConfigSpec struct {
	DeviceFilter any            `json:"device-filter,omitempty"`
	Devices      any            `json:"devices"`
	MigEnabled   *bool          `json:"mig-enabled"`
	MigDevices   map[string]int `json:"mig-devices"`
}

func strict(data []byte, into any) error {
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return err
	}
	decoder := json.NewDecoder(bytes.NewReader(raw))
	decoder.DisallowUnknownFields()
	return decoder.Decode(into)
}

func checkPlugin(name string, text string) []string {
	var config pluginConfig
	if err := strict([]byte(text), &config); err != nil {
		return []string{fmt.Sprintf("%s: unmarshal error: %v", name, err)}
	}
	var problems []string
	if config.Version != "" && config.Version != "v1" {
		problems = append(problems, fmt.Sprintf("%s: unknown version: %v", name, config.Version))
	}
	strategy := "none"
	if config.Flags.MigStrategy != nil {
		strategy = *config.Flags.MigStrategy
	}
	if strategy != "none" && strategy != "single" && strategy != "mixed" {
		problems = append(problems, fmt.Sprintf("%s: unknown MIG strategy: %v", name, strategy))
	}
	for label, sharing := range map[string]*replicated{"timeSlicing": config.Sharing.TimeSlicing, "mps": config.Sharing.MPS} {
		if sharing == nil {
			continue
		}
		if len(sharing.Resources) == 0 {
			problems = append(problems, fmt.Sprintf("%s: %s: no resources specified", name, label))
		}
		for _, resource := range sharing.Resources {
			if resource.Name == "" {
				problems = append(problems, fmt.Sprintf("%s: %s: no resource name specified", name, label))
			}
			if len(resource.Name) > 63 {
				problems = append(problems, fmt.Sprintf("%s: fully-qualified resource name must be 63 characters or less: %s", name, resource.Name))
			}
			if resource.Replicas == 0 {
				problems = append(problems, fmt.Sprintf("%s: %s: no replicas specified", name, label))
			} else if resource.Replicas < 2 {
				problems = append(problems, fmt.Sprintf("%s: %s: number of replicas must be >= 2", name, label))
			}
			if label == "mps" && resource.Replicas > 48 {
				problems = append(problems, fmt.Sprintf("%s: invalid MPS configuration: maximum allowed replicas exceeded: %d > 48", name, resource.Replicas))
			}
		}
	}
	if config.Sharing.MPS != nil && config.Sharing.TimeSlicing != nil {
		problems = append(problems, fmt.Sprintf("%s: time-slicing and MPS are mutually exclusive", name))
	}
	if config.Sharing.MPS != nil {
		if strategy == "mixed" {
			problems = append(problems, fmt.Sprintf("%s: using --mig-strategy=mixed is not supported with MPS", name))
		}
		if config.Flags.MpsRoot == nil || *config.Flags.MpsRoot == "" {
			problems = append(problems, fmt.Sprintf("%s: using MPS requires --mps-root to be specified", name))
		}
	}
	return problems
}

func checkMigParted(name string, text string) []string {
	var spec migSpec
	if err := strict([]byte(text), &spec); err != nil {
		return []string{fmt.Sprintf("%s: %v", name, err)}
	}
	var problems []string
	if spec.Version != "v1" {
		problems = append(problems, fmt.Sprintf("%s: unknown version: %v", name, spec.Version))
	}
	if len(spec.MigConfigs) == 0 {
		problems = append(problems, fmt.Sprintf("%s: at least one entry in 'mig-configs' is required", name))
	}
	nvlib := nvdev.New(nil)
	keys := make([]string, 0, len(spec.MigConfigs))
	for key := range spec.MigConfigs {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		entries := spec.MigConfigs[key]
		if len(entries) == 0 {
			problems = append(problems, fmt.Sprintf("%s: at least one entry in '%s' is required", name, key))
		}
		for _, entry := range entries {
			where := fmt.Sprintf("%s: %s", name, key)
			problems = append(problems, checkDevices(where, entry.Devices)...)
			if entry.MigEnabled == nil {
				problems = append(problems, where+": missing required field: mig-enabled")
				continue
			}
			if *entry.MigEnabled && entry.MigDevices == nil {
				problems = append(problems, where+": missing required field 'mig-devices' when 'mig-enabled' is true")
			}
			if !*entry.MigEnabled && len(entry.MigDevices) != 0 {
				problems = append(problems, where+": MIG devices included when 'mig-enabled' is false")
			}
			total := 0
			for profile, count := range entry.MigDevices {
				// NVIDIA's own profile parser, the one mig-parted's MigConfig validation calls.
				if err := nvlib.AssertValidMigProfileFormat(profile); err != nil {
					problems = append(problems, fmt.Sprintf("%s: invalid format for '%v': %v", where, profile, err))
				}
				if count < 0 {
					problems = append(problems, fmt.Sprintf("%s: invalid count for '%v': %d", where, profile, count))
				}
				total += count
			}
			if len(entry.MigDevices) > 0 && total == 0 {
				problems = append(problems, where+": all counts for all MigProfiles are 0")
			}
		}
	}
	return problems
}

func checkDevices(where string, devices any) []string {
	switch value := devices.(type) {
	case nil:
		return []string{where + ": missing required field: devices"}
	case string:
		if value != "all" {
			return []string{fmt.Sprintf("%s: invalid string input for 'devices': %v", where, value)}
		}
	case []any:
		for _, device := range value {
			number, ok := device.(float64)
			if !ok || number != float64(int(number)) || number < 0 {
				return []string{fmt.Sprintf("%s: devices must be 'all' or a list of GPU indexes, got %v", where, device)}
			}
		}
	default:
		return []string{fmt.Sprintf("%s: devices must be 'all' or a list of GPU indexes, got %v", where, value)}
	}
	return nil
}

func main() {
	var problems []string
	checked := 0
	for _, path := range os.Args[1:] {
		data, err := os.ReadFile(path)
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		var object configMap
		if err := yaml.Unmarshal(data, &object); err != nil || object.Kind != "ConfigMap" {
			problems = append(problems, fmt.Sprintf("%s: not a ConfigMap (%v)", path, err))
			continue
		}
		keys := make([]string, 0, len(object.Data))
		for key := range object.Data {
			keys = append(keys, key)
		}
		sort.Strings(keys)
		for _, key := range keys {
			name := object.Metadata.Name + "/" + key
			if key == "config.yaml" {
				problems = append(problems, checkMigParted(name, object.Data[key])...)
			} else {
				problems = append(problems, checkPlugin(name, object.Data[key])...)
			}
			checked++
		}
	}
	for _, problem := range problems {
		fmt.Println(problem)
	}
	if len(problems) > 0 {
		os.Exit(1)
	}
	fmt.Printf("nvcheck: %d config(s) accepted\n", checked)
}
