//! The webhook's connection cap against the process's open-files limit: each connection holds a
//! file descriptor, and a cap beyond what the limit leaves would let a burst of calls take the
//! descriptors the operator's own watches and API calls need (accept and connect fail with
//! EMFILE).

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

/// Descriptors left for everything but the webhook's connections: watches, API clients, the
/// probe and metrics server, the certificate files.
pub const RESERVED: u64 = 256;

/// The soft limit on open files; `None` where unlimited.
pub fn soft_limit() -> Option<u64> {
    getrlimit(Resource::Nofile).current
}

/// Raises the soft limit on open files to the hard one, as Go programs do at start: container
/// runtimes hand a process 1024 soft beside a hard limit hundreds of times that (containerd:
/// 1024 / 524288), and the soft one is what would cap the webhook's connections. Returns the
/// limits before and after when it moved; leaves them alone where the kernel refuses.
pub fn raise_soft_limit() -> Result<Option<(u64, u64)>, std::io::Error> {
    let now = getrlimit(Resource::Nofile);
    // An unlimited hard limit (which Linux does not allow for open files, but other kernels do)
    // gives no figure to raise to.
    let (Some(soft), Some(hard)) = (now.current, now.maximum) else {
        return Ok(None);
    };
    if hard <= soft {
        return Ok(None);
    }
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(hard),
            maximum: Some(hard),
        },
    )?;
    Ok(Some((soft, hard)))
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

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let hard = getrlimit(Resource::Nofile).maximum;
        let Some(below) = hard.map(|h| h - 1) else {
            // No hard limit here: nothing to raise to, and nothing raised.
            assert_eq!(raise_soft_limit().unwrap(), None);
            return;
        };
        // One below the hard limit, so that no other test of this process runs short meanwhile.
        // No other test of the library reads or sets the limit (the webhook starts only in the
        // integration tests, another process); one that did would race with these asserts.
        setrlimit(
            Resource::Nofile,
            Rlimit {
                current: Some(below),
                maximum: hard,
            },
        )
        .unwrap();
        assert_eq!(soft_limit(), Some(below));
        assert_eq!(raise_soft_limit().unwrap(), hard.map(|h| (below, h)));
        assert_eq!(soft_limit(), hard);
        assert_eq!(
            raise_soft_limit().unwrap(),
            None,
            "already at the hard limit"
        );
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
