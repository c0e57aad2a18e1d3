//! The webhook's connection cap against the process's open-files limit: each connection holds a
//! file descriptor, and a cap beyond what the limit leaves would let a burst of calls take the
//! descriptors the operator's own watches and API calls need (accept and connect fail with
//! EMFILE).

/// Descriptors left for everything but the webhook's connections: watches, API clients, the
/// probe and metrics server, the certificate files.
pub const RESERVED: u64 = 256;

/// The soft limit on open files as the kernel reports it (`/proc/self/limits`); `None` where
/// unreadable or unlimited.
pub fn soft_limit() -> Option<u64> {
    parse(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

fn parse(limits: &str) -> Option<u64> {
    let rest = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    rest.split_whitespace().next()?.parse().ok()
}

/// The cap in force: the one asked for, lowered to what the limit leaves beyond [`RESERVED`]
/// (at least half the limit, at least one).
pub fn cap(requested: usize, soft: Option<u64>) -> usize {
    let Some(soft) = soft else {
        return requested.max(1);
    };
    let room = soft.saturating_sub(RESERVED).max(soft / 2).max(1);
    requested
        .min(usize::try_from(room).unwrap_or(usize::MAX))
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \n\
Max cpu time              unlimited            unlimited            seconds   \n\
Max open files            1024                 524288               files     \n\
Max locked memory         8388608              8388608              bytes     \n";

    #[test]
    fn the_soft_limit_is_read_from_the_kernels_table() {
        assert_eq!(parse(LIMITS), Some(1024));
        assert_eq!(parse(&LIMITS.replace("1024 ", "unlimited ")), None);
        assert_eq!(parse("Max cpu time unlimited unlimited seconds"), None);
        // This process's own table, as the kernel writes it.
        assert!(soft_limit().is_some_and(|n| n > 0), "{:?}", soft_limit());
    }

    #[test]
    fn the_cap_leaves_the_reserve_to_the_rest_of_the_operator() {
        // A container's usual 1024 leaves the default 512 alone.
        assert_eq!(cap(512, Some(1024)), 512);
        assert_eq!(cap(4096, Some(1024)), 768);
        assert_eq!(cap(4096, Some(20_000)), 4096);
        // A small limit: half of it, never none.
        assert_eq!(cap(512, Some(300)), 150);
        assert_eq!(cap(512, Some(1)), 1);
        assert_eq!(cap(0, None), 1);
        assert_eq!(cap(100_000, None), 100_000);
    }
}
