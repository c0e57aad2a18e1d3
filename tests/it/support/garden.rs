//! Gardener objects as a real landscape has them, for tests that need bindings and Shoots served
//! by the real gardener-apiserver (`e2e/testenv up` starts it with its default admission
//! plugins and creates CloudProfiles for aws, azure, gcp, openstack and alicloud, their
//! ControllerRegistrations and the project `kyma`):
//!
//! - [`project`] / [`create_project`]: a Project and its namespace `garden-<name>`; bindings and
//!   Shoots may only live in project namespaces.
//! - [`create_binding`] / [`create_secret_binding`]: the Secret a binding references, then the
//!   binding (admission rejects a binding whose Secret is missing or unreadable to the caller);
//!   [`create_binding_with`] and its wrappers: a CredentialsBinding on a WorkloadIdentity or an
//!   InternalSecret, or one that references a Quota.
//! - [`create_shoot`]: a valid Shoot for a binding (workers, Kubernetes version, region, machine
//!   type and image from the binding's CloudProfile, networking); [`delete_shoot`] deletes it
//!   with the confirmation annotation Gardener demands. Delete Shoots before their bindings:
//!   a Shoot whose binding is gone can be neither updated nor deleted.
//!
//! The `*_object` functions build the same objects without sending them, for callers that
//! create with retries (the chaos test) or in bulk (the load benchmark).
//!
//! Limits to mind: a project name has at most 10 characters, and a Shoot name plus its project
//! name at most 21. Self-contained (no `super::` items) so that `tests/it/chaos.rs` and
//! `examples/load/main.rs` can include it by path.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

/// The annotation without which gardener-apiserver refuses to delete a Shoot.
pub const DELETION_CONFIRMATION: &str = "confirmation.gardener.cloud/deletion";
/// The networking type the testenv registers.
pub const NETWORKING: &str = "calico";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: format!("{group}/{version}"),
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn credentials_binding_resource() -> ApiResource {
    resource(
        "security.gardener.cloud",
        "v1alpha1",
        "CredentialsBinding",
        "credentialsbindings",
    )
}

pub fn secret_binding_resource() -> ApiResource {
    resource(
        "core.gardener.cloud",
        "v1beta1",
        "SecretBinding",
        "secretbindings",
    )
}

pub fn shoot_resource() -> ApiResource {
    resource("core.gardener.cloud", "v1beta1", "Shoot", "shoots")
}

pub fn project_resource() -> ApiResource {
    resource("core.gardener.cloud", "v1beta1", "Project", "projects")
}

pub fn cloud_profile_resource() -> ApiResource {
    resource(
        "core.gardener.cloud",
        "v1beta1",
        "CloudProfile",
        "cloudprofiles",
    )
}

fn dynamic(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a well-formed object")
}

// ---------------------------------------------------------------------------------------------
// Projects

static PROJECTS: AtomicU32 = AtomicU32::new(0);

fn base36(mut n: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ascii")
}

/// A project name unique to this process and call: `t` + the pid and a counter in base 36, at
/// most 10 characters (Gardener's limit), so Shoot names up to 11 characters fit.
pub fn unique_project_name() -> String {
    let n = PROJECTS.fetch_add(1, Ordering::SeqCst);
    let pid = u64::from(std::process::id()) % 36u64.pow(4);
    format!("t{:0>4}{}", base36(pid), base36(u64::from(n)))
}

/// The namespace of a project as Gardener names it.
pub fn project_namespace(project: &str) -> String {
    format!("garden-{project}")
}

/// Creates a project of a fresh name and its namespace; returns the namespace.
pub async fn project(client: &Client) -> String {
    loop {
        let name = unique_project_name();
        // A name left over from an earlier run of the same pid on a long-lived control plane
        // is skipped, never shared.
        if create_project_fresh(client, &name).await {
            return project_namespace(&name);
        }
    }
}

/// The project namespace object (the labels gardener-controller-manager would set).
pub fn project_namespace_object(project: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": project_namespace(project), "labels": {
            "project.gardener.cloud/name": project, "gardener.cloud/role": "project"}},
    })
}

pub fn project_object(project: &str) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Project",
        "metadata": {"name": project},
        "spec": {"namespace": project_namespace(project)},
    })
}

/// Creates the project `name` and its namespace, or keeps them if they exist (fixed names:
/// chaos, load benchmark); returns the namespace.
pub async fn create_project(client: &Client, name: &str) -> String {
    create_project_fresh(client, name).await;
    project_namespace(name)
}

/// Whether both objects were newly created.
async fn create_project_fresh(client: &Client, name: &str) -> bool {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(project_namespace_object(name)).expect("namespace");
    let fresh_ns = created(
        namespaces.create(&PostParams::default(), &ns).await,
        "project namespace",
    );
    let projects: Api<DynamicObject> = Api::all_with(client.clone(), &project_resource());
    let fresh_project = created(
        projects
            .create(&PostParams::default(), &dynamic(project_object(name)))
            .await,
        &format!("Project {name}"),
    );
    fresh_ns && fresh_project
}

/// true when created, false when it already existed; any other error fails the test.
fn created<T>(result: Result<T, kube::Error>, what: &str) -> bool {
    match result {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 409 => false,
        Err(e) => panic!("creating {what}: {e}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Secrets and bindings

/// The Secret a binding references (same name as the binding), as an account team creates it.
pub fn secret_object(ns: &str, name: &str, provider: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": ns},
        "stringData": {"provider": provider, "credentials": format!("test credentials of {name}")},
    })
}

pub fn binding_object(
    ns: &str,
    name: &str,
    provider: &str,
    labels: &BTreeMap<String, String>,
) -> Value {
    json!({
        "apiVersion": "security.gardener.cloud/v1alpha1", "kind": "CredentialsBinding",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "provider": {"type": provider},
        "credentialsRef": {"apiVersion": "v1", "kind": "Secret", "name": name, "namespace": ns},
    })
}

pub fn secret_binding_object(
    ns: &str,
    name: &str,
    provider: &str,
    labels: &BTreeMap<String, String>,
) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "SecretBinding",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "provider": {"type": provider},
        "secretRef": {"name": name, "namespace": ns},
    })
}

fn label_map(labels: &[(&str, &str)]) -> BTreeMap<String, String> {
    labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub async fn create_secret(client: &Client, ns: &str, name: &str, provider: &str) {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), ns);
    let obj = serde_json::from_value(secret_object(ns, name, provider)).expect("secret");
    created(
        secrets.create(&PostParams::default(), &obj).await,
        &format!("Secret {ns}/{name}"),
    );
}

/// Creates a CredentialsBinding with these labels, and the Secret it references.
pub async fn create_binding(
    client: &Client,
    ns: &str,
    name: &str,
    provider: &str,
    labels: &[(&str, &str)],
) {
    create_secret(client, ns, name, provider).await;
    let obj = dynamic(binding_object(ns, name, provider, &label_map(labels)));
    Api::namespaced_with(client.clone(), ns, &credentials_binding_resource())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create CredentialsBinding {ns}/{name}: {e}"));
}

/// What a CredentialsBinding's `credentialsRef` points at; gardener-apiserver (v1.141) accepts
/// these three kinds and checks, on every create and update of the binding, that the caller may
/// `get` the one referenced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credentials {
    Secret,
    /// `security.gardener.cloud/v1alpha1`; needs `spec.audiences` and `spec.targetSystem.type`
    /// (the binding's provider type).
    WorkloadIdentity,
    /// `core.gardener.cloud/v1beta1`, a Secret only gardener-apiserver serves.
    InternalSecret,
}

impl Credentials {
    fn api_version(self) -> &'static str {
        match self {
            Credentials::Secret => "v1",
            Credentials::WorkloadIdentity => "security.gardener.cloud/v1alpha1",
            Credentials::InternalSecret => "core.gardener.cloud/v1beta1",
        }
    }

    pub fn kind(self) -> &'static str {
        match self {
            Credentials::Secret => "Secret",
            Credentials::WorkloadIdentity => "WorkloadIdentity",
            Credentials::InternalSecret => "InternalSecret",
        }
    }
}

pub fn workload_identity_resource() -> ApiResource {
    resource(
        "security.gardener.cloud",
        "v1alpha1",
        "WorkloadIdentity",
        "workloadidentities",
    )
}

pub fn internal_secret_resource() -> ApiResource {
    resource(
        "core.gardener.cloud",
        "v1beta1",
        "InternalSecret",
        "internalsecrets",
    )
}

pub fn quota_resource() -> ApiResource {
    resource("core.gardener.cloud", "v1beta1", "Quota", "quotas")
}

/// The object a binding's credentials reference names, of that kind (same name as the binding).
pub fn credentials_object(ns: &str, name: &str, provider: &str, creds: Credentials) -> Value {
    match creds {
        Credentials::Secret => secret_object(ns, name, provider),
        Credentials::WorkloadIdentity => json!({
            "apiVersion": creds.api_version(), "kind": creds.kind(),
            "metadata": {"name": name, "namespace": ns},
            "spec": {"audiences": ["hap-test"], "targetSystem": {"type": provider}},
        }),
        Credentials::InternalSecret => json!({
            "apiVersion": creds.api_version(), "kind": creds.kind(), "type": "Opaque",
            "metadata": {"name": name, "namespace": ns},
            "stringData": {"provider": provider, "credentials": format!("test credentials of {name}")},
        }),
    }
}

/// A Quota of credentials scope, as a trial landscape limits the cluster lifetime of an account.
pub fn quota_object(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Quota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"scope": {"apiVersion": "v1", "kind": "Secret"}, "clusterLifetimeDays": 14,
                 "metrics": {"cpu": "200"}},
    })
}

/// A CredentialsBinding whose `credentialsRef` is `creds` (named like the binding), and which
/// references the Quota `quota` of its namespace if given.
pub fn binding_object_with(
    ns: &str,
    name: &str,
    provider: &str,
    labels: &BTreeMap<String, String>,
    creds: Credentials,
    quota: Option<&str>,
) -> Value {
    let mut b = binding_object(ns, name, provider, labels);
    b["credentialsRef"] = json!({"apiVersion": creds.api_version(), "kind": creds.kind(),
                                 "name": name, "namespace": ns});
    if let Some(q) = quota {
        b["quotas"] = json!([{"name": q, "namespace": ns}]);
    }
    b
}

/// Creates `obj` (of resource `ar`) in `ns`; it must not exist yet.
pub async fn create_dynamic(client: &Client, ns: &str, ar: &ApiResource, obj: Value) {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let created_now = created(
        Api::namespaced_with(client.clone(), ns, ar)
            .create(&PostParams::default(), &dynamic(obj))
            .await,
        &format!("{} {ns}/{name}", ar.kind),
    );
    assert!(created_now, "{} {ns}/{name} existed already", ar.kind);
}

/// Creates the credentials of kind `creds`, the Quota `quota` (if given) and a CredentialsBinding
/// referencing both, with these labels.
pub async fn create_binding_with(
    client: &Client,
    ns: &str,
    name: &str,
    provider: &str,
    labels: &[(&str, &str)],
    creds: Credentials,
    quota: Option<&str>,
) {
    match creds {
        Credentials::Secret => create_secret(client, ns, name, provider).await,
        Credentials::WorkloadIdentity => {
            let obj = credentials_object(ns, name, provider, creds);
            create_dynamic(client, ns, &workload_identity_resource(), obj).await;
        }
        Credentials::InternalSecret => {
            let obj = credentials_object(ns, name, provider, creds);
            create_dynamic(client, ns, &internal_secret_resource(), obj).await;
        }
    }
    if let Some(q) = quota {
        create_dynamic(client, ns, &quota_resource(), quota_object(ns, q)).await;
    }
    let obj = binding_object_with(ns, name, provider, &label_map(labels), creds, quota);
    create_dynamic(client, ns, &credentials_binding_resource(), obj).await;
}

/// A CredentialsBinding on a WorkloadIdentity of the binding's provider type.
pub async fn create_workload_identity_binding(
    client: &Client,
    ns: &str,
    name: &str,
    provider: &str,
    labels: &[(&str, &str)],
) {
    let creds = Credentials::WorkloadIdentity;
    create_binding_with(client, ns, name, provider, labels, creds, None).await;
}

/// A CredentialsBinding on an InternalSecret.
pub async fn create_internal_secret_binding(
    client: &Client,
    ns: &str,
    name: &str,
    provider: &str,
    labels: &[(&str, &str)],
) {
    let creds = Credentials::InternalSecret;
    create_binding_with(client, ns, name, provider, labels, creds, None).await;
}

/// A Secret-backed CredentialsBinding that references a Quota of its own name.
pub async fn create_quota_binding(
    client: &Client,
    ns: &str,
    name: &str,
    provider: &str,
    labels: &[(&str, &str)],
) {
    let creds = Credentials::Secret;
    create_binding_with(client, ns, name, provider, labels, creds, Some(name)).await;
}

/// Creates a SecretBinding with these labels, and the Secret it references.
pub async fn create_secret_binding(
    client: &Client,
    ns: &str,
    name: &str,
    provider: &str,
    labels: &[(&str, &str)],
) {
    create_secret(client, ns, name, provider).await;
    let obj = dynamic(secret_binding_object(
        ns,
        name,
        provider,
        &label_map(labels),
    ));
    Api::namespaced_with(client.clone(), ns, &secret_binding_resource())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create SecretBinding {ns}/{name}: {e}"));
}

// ---------------------------------------------------------------------------------------------
// Shoots

/// What a Shoot needs from its provider's CloudProfile.
#[derive(Clone, Debug)]
pub struct Profile {
    pub provider: String,
    pub region: String,
    pub machine_type: String,
    pub image: String,
    pub image_version: String,
    /// Kubernetes versions, highest first.
    pub kubernetes: Vec<String>,
}

impl Profile {
    /// The highest version, or the highest below 1.34 for a Shoot naming a SecretBinding
    /// (`secretBindingName` is refused from 1.34 on).
    pub fn kubernetes_version(&self, secret_binding: bool) -> &str {
        self.kubernetes
            .iter()
            .find(|v| !secret_binding || minor(v) < 34)
            .unwrap_or_else(|| panic!("CloudProfile {} has no suitable version", self.provider))
    }
}

fn minor(version: &str) -> u32 {
    version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or(0)
}

static PROFILES: Mutex<BTreeMap<String, Profile>> = Mutex::new(BTreeMap::new());

/// The CloudProfile of `provider` (named after the provider type in the testenv), read once
/// per process: every testenv bootstraps the same profiles.
pub async fn profile(client: &Client, provider: &str) -> Profile {
    if let Some(p) = PROFILES.lock().expect("profiles").get(provider) {
        return p.clone();
    }
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &cloud_profile_resource());
    let cp = api.get(provider).await.unwrap_or_else(|e| {
        panic!("CloudProfile {provider} (does the testenv serve the Gardener API?): {e}")
    });
    let spec = &cp.data["spec"];
    let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
    let mut kubernetes: Vec<String> = spec["kubernetes"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| s(&v["version"]))
        .collect();
    kubernetes.sort_by_key(|v| {
        std::cmp::Reverse(
            v.split('.')
                .map(|p| p.parse::<u32>().unwrap_or(0))
                .collect::<Vec<_>>(),
        )
    });
    let image = &spec["machineImages"][0];
    let p = Profile {
        provider: provider.to_string(),
        region: s(&spec["regions"][0]["name"]),
        machine_type: s(&spec["machineTypes"][0]["name"]),
        image: s(&image["name"]),
        image_version: s(&image["versions"][0]["version"]),
        kubernetes,
    };
    PROFILES
        .lock()
        .expect("profiles")
        .insert(provider.to_string(), p.clone());
    p
}

/// Which field of a Shoot names its binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingRef {
    CredentialsBinding,
    SecretBinding,
}

/// A valid Shoot on `binding`: one worker, the profile's region, machine type, image and a
/// Kubernetes version it offers, the registered networking type.
pub fn shoot_object(ns: &str, name: &str, binding: &str, kind: BindingRef, p: &Profile) -> Value {
    let mut spec = json!({
        "cloudProfile": {"kind": "CloudProfile", "name": p.provider},
        "region": p.region,
        "provider": {"type": p.provider, "workers": [{
            "name": "worker", "minimum": 1, "maximum": 2,
            "machine": {"type": p.machine_type, "image": {"name": p.image, "version": p.image_version}},
        }]},
        "kubernetes": {"version": p.kubernetes_version(kind == BindingRef::SecretBinding)},
        "networking": {"type": NETWORKING, "nodes": "10.250.0.0/16"},
    });
    let field = match kind {
        BindingRef::CredentialsBinding => "credentialsBindingName",
        BindingRef::SecretBinding => "secretBindingName",
    };
    spec[field] = json!(binding);
    json!({
        "apiVersion": "core.gardener.cloud/v1beta1", "kind": "Shoot",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

/// Creates a valid Shoot in `ns` that uses `binding` (a CredentialsBinding, else a
/// SecretBinding of that name), on the binding's provider.
pub async fn create_shoot(client: &Client, ns: &str, name: &str, binding: &str) {
    let (kind, provider) = binding_provider(client, ns, binding).await;
    let p = profile(client, &provider).await;
    let obj = dynamic(shoot_object(ns, name, binding, kind, &p));
    Api::namespaced_with(client.clone(), ns, &shoot_resource())
        .create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create Shoot {ns}/{name} on {binding}: {e}"));
}

/// Which kind of binding `name` is and its provider type.
pub async fn binding_provider(client: &Client, ns: &str, name: &str) -> (BindingRef, String) {
    let credentials: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &credentials_binding_resource());
    if let Some(b) = credentials
        .get_opt(name)
        .await
        .expect("get CredentialsBinding")
    {
        let t = b.data["provider"]["type"].as_str().unwrap_or_default();
        return (BindingRef::CredentialsBinding, t.to_string());
    }
    let secret: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &secret_binding_resource());
    let b = secret
        .get_opt(name)
        .await
        .expect("get SecretBinding")
        .unwrap_or_else(|| panic!("no binding {ns}/{name} to create a Shoot on"));
    let t = b.data["provider"]["type"].as_str().unwrap_or_default();
    // A SecretBinding's provider.type may list several types; the first is its provider.
    let first = t.split(',').next().unwrap_or_default();
    (BindingRef::SecretBinding, first.to_string())
}

/// Deletes a Shoot the way Gardener demands: the confirmation annotation first. Without
/// gardenlet nothing adds finalizers, so it is gone when this returns.
pub async fn delete_shoot(client: &Client, ns: &str, name: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &shoot_resource());
    let confirm = json!({"metadata": {"annotations": {DELETION_CONFIRMATION: "true"}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&confirm))
        .await
        .unwrap_or_else(|e| panic!("confirm deletion of Shoot {ns}/{name}: {e}"));
    api.delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete Shoot {ns}/{name}: {e}"));
}

/// Sets a Shoot's `status.lastErrors` codes as the gardenlet would (through shoots/status).
pub async fn set_shoot_errors(client: &Client, ns: &str, shoot: &str, codes: &[&str]) {
    let errors: Vec<Value> = codes
        .iter()
        .map(|c| json!({"description": format!("infrastructure: {c}"), "codes": [c], "lastUpdateTime": "2026-11-26T12:00:00Z"}))
        .collect();
    let errors = if errors.is_empty() {
        Value::Null
    } else {
        json!(errors)
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &shoot_resource());
    api.patch_status(
        shoot,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"lastErrors": errors}})),
    )
    .await
    .unwrap_or_else(|e| panic!("patch status of Shoot {shoot}: {e}"));
}

/// Sets a Shoot's `status.lastOperation` as the gardenlet would (through shoots/status).
pub async fn set_shoot_last_operation(
    client: &Client,
    ns: &str,
    shoot: &str,
    type_: &str,
    state: &str,
) {
    let progress = if state == "Succeeded" { 100 } else { 40 };
    let operation = json!({
        "type": type_,
        "state": state,
        "progress": progress,
        "description": format!("{type_} {state}"),
        "lastUpdateTime": jiff::Timestamp::now().round(jiff::Unit::Second).expect("round").to_string(),
    });
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &shoot_resource());
    api.patch_status(
        shoot,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"lastOperation": operation}})),
    )
    .await
    .unwrap_or_else(|e| panic!("patch status.lastOperation of Shoot {shoot}: {e}"));
}
