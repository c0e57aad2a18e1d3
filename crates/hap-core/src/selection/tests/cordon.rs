//! Cordoned bindings: never claimed for a new tenant, kept by the tenant that holds
//! them; a property over random pools and a pin to a cordoned binding.

use proptest::prelude::*;

use super::*;
use crate::pools::lifecycle::CORDONED;

const CORDON: (&str, &str) = (CORDONED, "true");

#[test]
fn a_cordoned_free_binding_is_never_claimed_and_the_message_says_why() {
    let p = pool("aws", false, false);
    let inv = inventory(
        vec![binding("a", &[("hyperscalerType", "aws"), CORDON])],
        vec![],
        vec![],
    );
    let c = claim("c", "ga", Some("s"), None);
    match pick(&inv, &InFlight::default(), &c, &p, &policy(&[], &[])) {
        Choice::Exhausted { message, .. } => {
            assert!(message.contains("1 free but cordoned"), "{message}")
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
}

#[test]
fn the_tenant_holding_a_cordoned_binding_keeps_using_it() {
    let p = pool("aws", false, false);
    let inv = inventory(
        vec![
            binding(
                "a",
                &[("hyperscalerType", "aws"), ("tenantName", "ga"), CORDON],
            ),
            binding("b", AWS),
        ],
        vec![],
        vec![shoot("s1", Some("a"))],
    );
    let c = claim("c", "ga", Some("s2"), None);
    assert_eq!(
        pick(&inv, &InFlight::default(), &c, &p, &policy(&[], &[])),
        use_of("a", UseReason::Reused)
    );
}

proptest! {
    /// Whatever the pool holds, a new claim never gets a cordoned binding it would have to claim,
    /// and it still gets a binding whenever an uncordoned free one exists.
    #[test]
    fn no_claim_ever_takes_a_cordoned_binding(
        spec in proptest::collection::vec((any::<bool>(), proptest::option::of(0usize..3)), 1..10),
        tenant in 0usize..4,
    ) {
        let tenants = ["ga-0", "ga-1", "ga-2", "ga-3"];
        let bindings: Vec<_> = spec
            .iter()
            .enumerate()
            .map(|(i, (cordoned, owner))| {
                let mut l = vec![("hyperscalerType", "aws")];
                if *cordoned {
                    l.push(CORDON);
                }
                if let Some(o) = owner {
                    l.push(("tenantName", tenants[*o]));
                }
                binding(&format!("b{i}"), &l)
            })
            .collect();
        let inv = inventory(bindings, vec![], vec![]);
        let ga = tenants[tenant];
        let c = claim("c", ga, Some("s"), None);
        let got = pick(&inv, &InFlight::default(), &c, &pool("aws", false, false), &policy(&[], &[]));
        let cordoned = |b: &str| spec[b[1..].parse::<usize>().expect("index")].0;
        let holds = spec.iter().any(|(_, o)| o.map(|o| tenants[o]) == Some(ga));
        let open = spec.iter().any(|(c, o)| !c && o.is_none());
        match &got {
            Choice::Claim { binding, .. } => prop_assert!(!cordoned(binding), "{got:?}"),
            Choice::Use { .. } => prop_assert!(holds, "{got:?}"),
            Choice::Exhausted { .. } => prop_assert!(!holds && !open, "{got:?}"),
            other => prop_assert!(false, "unexpected {other:?}"),
        }
    }
}

/// The cleanup job's failure mark keeps a binding from every new tenant even after its `dirty`
/// label is gone, and the waiting claim's message names the mark.
#[test]
fn a_binding_marked_cleanup_failed_is_never_claimed_and_the_message_says_why() {
    use crate::pools::lifecycle::CLEANUP_FAILED;
    let p = pool("aws", false, false);
    let failed = binding("a", &[("hyperscalerType", "aws"), (CLEANUP_FAILED, "true")]);
    let c = claim("c", "ga", Some("s"), None);
    let inv = inventory(vec![failed.clone()], vec![], vec![]);
    match pick(&inv, &InFlight::default(), &c, &p, &policy(&[], &[])) {
        Choice::Exhausted { message, .. } => assert!(
            message.contains(
                "1 free but marked accountpool.io/cleanup-failed=true by the cleanup job"
            ),
            "{message}"
        ),
        other => panic!("expected Exhausted, got {other:?}"),
    }
    let inv = inventory(vec![failed, binding("b", AWS)], vec![], vec![]);
    match pick(&inv, &InFlight::default(), &c, &p, &policy(&[], &[])) {
        Choice::Claim { binding, .. } => assert_eq!(binding, "b"),
        other => panic!("expected a claim of b, got {other:?}"),
    }
}

/// The cleanup job clears `dirty`, then the tenant, then its mark: between the first two writes
/// the binding shows the tenant, not dirty, and marked. The tenant's next cluster must not go
/// onto it (it was reused there: an account whose wipe failed got a new cluster), while a
/// cluster already counted there keeps it.
#[test]
fn a_tenant_gets_no_new_cluster_on_its_binding_whose_cleanup_failed() {
    use crate::pools::lifecycle::CLEANUP_FAILED;
    let p = pool("aws", false, false);
    let marked = binding(
        "a",
        &[
            ("hyperscalerType", "aws"),
            ("tenantName", "ga"),
            (CLEANUP_FAILED, "true"),
        ],
    );
    let c = claim("c", "ga", Some("s-new"), None);
    let inv = inventory(vec![marked.clone(), binding("b", AWS)], vec![], vec![]);
    match pick(&inv, &InFlight::default(), &c, &p, &policy(&[], &[])) {
        Choice::Claim { binding, .. } => assert_eq!(binding, "b"),
        other => panic!("expected a claim of b, not a use of the marked a: {other:?}"),
    }
}
