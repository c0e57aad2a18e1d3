package main

// What a Gardener landscape has before any binding exists, so that the default admission
// plugins accept valid bindings and Shoots: a CloudProfile per provider the tests, examples and
// demo use, ControllerRegistrations for their extension types (the provider's ControlPlane,
// Infrastructure and Worker, one Network and one OperatingSystemConfig type), and the demo's
// project `kyma` with its namespace `garden-kyma`. Tests create projects of their own
// (tests/it/support/garden.rs) and read these CloudProfiles to build valid Shoots.

import "fmt"

type provider struct {
	typ     string
	regions []string
	machine string
}

// landscapeProviders: Gardener provider types (SAP Converged Cloud is `openstack`). Each
// CloudProfile offers the same Kubernetes versions and machine image.
var landscapeProviders = []provider{
	{"aws", []string{"eu-central-1", "eu-west-1", "us-east-1", "ap-southeast-1"}, "m6i.large"},
	{"azure", []string{"westeurope", "northeurope", "eastus", "switzerlandnorth"}, "Standard_D2s_v5"},
	{"gcp", []string{"europe-west3", "europe-west1", "us-central1", "me-central2"}, "n2-standard-2"},
	{"openstack", []string{"eu-de-1", "eu-de-2", "na-us-1", "ap-jp-1"}, "g_c2_m8"},
	{"alicloud", []string{"eu-central-1", "ap-southeast-1", "cn-shanghai"}, "ecs.g6.large"},
}

const (
	landscapeNetworking = "calico"
	landscapeImage      = "gardenlinux"
	landscapeImageVer   = "1877.3.0"
)

// Kubernetes versions of every CloudProfile: 1.34 for Shoots naming a CredentialsBinding,
// 1.33 because `secretBindingName` is only allowed below 1.34.
var landscapeKubernetes = []string{"1.34.3", "1.33.7"}

// landscapeProjects: project name → namespace.
var landscapeProjects = map[string]string{"kyma": "garden-kyma"}

func (e env) bootstrapLandscape() error {
	api, err := e.admin()
	if err != nil {
		return err
	}
	const core = "/apis/core.gardener.cloud/v1beta1"
	var versions []any
	for _, v := range landscapeKubernetes {
		versions = append(versions, map[string]any{"version": v})
	}
	for _, p := range landscapeProviders {
		var regions []any
		for _, r := range p.regions {
			regions = append(regions, map[string]any{"name": r})
		}
		profile := map[string]any{
			"apiVersion": "core.gardener.cloud/v1beta1", "kind": "CloudProfile",
			"metadata": map[string]any{"name": p.typ},
			"spec": map[string]any{
				"type":       p.typ,
				"kubernetes": map[string]any{"versions": versions},
				"regions":    regions,
				"machineTypes": []any{map[string]any{
					"name": p.machine, "cpu": "2", "gpu": "0", "memory": "8Gi", "usable": true, "architecture": "amd64",
				}},
				"machineImages": []any{map[string]any{
					"name": landscapeImage,
					"versions": []any{map[string]any{
						"version": landscapeImageVer, "architectures": []any{"amd64"},
						"cri": []any{map[string]any{"name": "containerd"}},
					}},
				}},
			},
		}
		if err := api.create(core+"/cloudprofiles", profile); err != nil {
			return err
		}
		if err := api.create(core+"/controllerregistrations", registration("provider-"+p.typ,
			[][2]string{{"ControlPlane", p.typ}, {"Infrastructure", p.typ}, {"Worker", p.typ}})); err != nil {
			return err
		}
	}
	for name, kinds := range map[string][][2]string{
		"networking-" + landscapeNetworking: {{"Network", landscapeNetworking}},
		"os-" + landscapeImage:              {{"OperatingSystemConfig", landscapeImage}},
	} {
		if err := api.create(core+"/controllerregistrations", registration(name, kinds)); err != nil {
			return err
		}
	}
	for project, ns := range landscapeProjects {
		if err := createProject(api, project, ns); err != nil {
			return err
		}
	}
	return nil
}

func registration(name string, kinds [][2]string) map[string]any {
	var resources []any
	for _, k := range kinds {
		resources = append(resources, map[string]any{"kind": k[0], "type": k[1]})
	}
	return map[string]any{
		"apiVersion": "core.gardener.cloud/v1beta1", "kind": "ControllerRegistration",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"resources": resources},
	}
}

// createProject creates the project namespace (gardener-controller-manager would; it does not
// run here) and the Project that owns it.
func createProject(api adminAPI, name, ns string) error {
	namespace := map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ns, "labels": map[string]any{
			"project.gardener.cloud/name": name, "gardener.cloud/role": "project",
		}},
	}
	if err := api.create("/api/v1/namespaces", namespace); err != nil {
		return err
	}
	project := map[string]any{
		"apiVersion": "core.gardener.cloud/v1beta1", "kind": "Project",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"namespace": ns},
	}
	if err := api.create("/apis/core.gardener.cloud/v1beta1/projects", project); err != nil {
		return fmt.Errorf("project %s: %w", name, err)
	}
	return nil
}
