//! Regular expressions the CRD types of several files share; one place, so that `sources`,
//! `tenants` and `lifecycle` need not import `hapconfig` (which imports them).

/// DNS-1123 label, as Kubernetes namespaces are named.
pub const NAMESPACE_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// A qualified label key (optional DNS prefix, then a name).
pub const LABEL_KEY_PATTERN: &str = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$";
/// A Go duration as Kubernetes' metav1.Duration accepts it (`24h`, `90m`, `1h30m`, `0s`).
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$";
