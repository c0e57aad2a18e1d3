//! A map ordered by key that is a short sorted list while it has few entries and a `BTreeMap`
//! once it grows: the index's inner maps (clusters per binding, bindings per cluster, claims per
//! binding) and the labels of each binding it keeps. Nearly all of them hold a few entries, and
//! a `BTreeMap` node costs ~300 bytes (~550 with `String` values): at 10k Shoots and claims the
//! inner maps were 7 MB of the index, and at 50k bindings their labels were ~32 MB.

use std::collections::BTreeMap;

/// Entries up to which the map stays a list (a search is then a few string comparisons).
const FEW: usize = 8;

#[derive(Clone, Debug)]
pub enum SmallMap<V> {
    /// Sorted by key, no key twice.
    Few(Vec<(String, V)>),
    Many(BTreeMap<String, V>),
}

impl<V> Default for SmallMap<V> {
    fn default() -> Self {
        SmallMap::Few(Vec::new())
    }
}

impl<V> SmallMap<V> {
    pub fn len(&self) -> usize {
        match self {
            SmallMap::Few(v) => v.len(),
            SmallMap::Many(m) => m.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, key: &str) -> Option<&V> {
        match self {
            SmallMap::Few(v) => find(v, key).ok().map(|i| &v[i].1),
            SmallMap::Many(m) => m.get(key),
        }
    }

    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut V> {
        match self {
            SmallMap::Few(v) => find(v, key).ok().map(|i| &mut v[i].1),
            SmallMap::Many(m) => m.get_mut(key),
        }
    }

    /// Sets `key` to `value`; the value it had, if any.
    pub fn insert(&mut self, key: String, value: V) -> Option<V> {
        match self {
            SmallMap::Few(v) => match find(v, &key) {
                Ok(i) => Some(std::mem::replace(&mut v[i].1, value)),
                Err(i) if v.len() < FEW => {
                    grow_by_one(v);
                    v.insert(i, (key, value));
                    None
                }
                Err(_) => {
                    let mut m: BTreeMap<String, V> = std::mem::take(v).into_iter().collect();
                    m.insert(key, value);
                    *self = SmallMap::Many(m);
                    None
                }
            },
            SmallMap::Many(m) => m.insert(key, value),
        }
    }

    /// The value of `key`, inserted as `V::default()` if absent.
    pub fn entry_or_default(&mut self, key: &str) -> &mut V
    where
        V: Default,
    {
        if let SmallMap::Few(v) = self
            && v.len() >= FEW
            && find(v, key).is_err()
        {
            *self = SmallMap::Many(std::mem::take(v).into_iter().collect());
        }
        match self {
            SmallMap::Few(v) => {
                let i = find(v, key).unwrap_or_else(|i| {
                    grow_by_one(v);
                    v.insert(i, (key.to_string(), V::default()));
                    i
                });
                &mut v[i].1
            }
            SmallMap::Many(m) => m.entry(key.to_string()).or_default(),
        }
    }

    /// Removes `key`; a map that shrinks back to a few entries becomes a list again.
    pub fn remove(&mut self, key: &str) -> Option<V> {
        match self {
            SmallMap::Few(v) => find(v, key).ok().map(|i| v.remove(i).1),
            SmallMap::Many(m) => {
                let removed = m.remove(key);
                if m.len() <= FEW / 2 {
                    *self = SmallMap::Few(std::mem::take(m).into_iter().collect());
                }
                removed
            }
        }
    }

    /// The entries in key order.
    pub fn iter(&self) -> Iter<'_, V> {
        match self {
            SmallMap::Few(v) => Iter::Few(v.iter()),
            SmallMap::Many(m) => Iter::Many(m.iter()),
        }
    }

    /// The keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &String> + '_ {
        self.iter().map(|(k, _)| k)
    }
}

/// Equal when the entries are: a map of five to eight entries can be either a list or a tree,
/// depending on how it got there.
impl<V: PartialEq> PartialEq for SmallMap<V> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<V: Eq> Eq for SmallMap<V> {}

impl<V> FromIterator<(String, V)> for SmallMap<V> {
    fn from_iter<I: IntoIterator<Item = (String, V)>>(entries: I) -> Self {
        BTreeMap::from_iter(entries).into()
    }
}

/// A list when it has few entries, sized exactly: most maps never change after they are built.
impl<V> From<BTreeMap<String, V>> for SmallMap<V> {
    fn from(m: BTreeMap<String, V>) -> Self {
        if m.len() <= FEW {
            SmallMap::Few(m.into_iter().collect())
        } else {
            SmallMap::Many(m)
        }
    }
}

impl<V, const N: usize> From<[(String, V); N]> for SmallMap<V> {
    fn from(entries: [(String, V); N]) -> Self {
        entries.into_iter().collect()
    }
}

/// A set of names in `BTreeSet` order, kept as a `SmallMap` without values: the bindings a
/// tenant holds in a pool and the claims that record a binding are one or two names each, and a
/// `BTreeSet` of one name took a ~280-byte node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SmallSet(SmallMap<()>);

impl SmallSet {
    pub const fn new() -> Self {
        SmallSet(SmallMap::Few(Vec::new()))
    }

    /// Whether `name` was not in the set yet.
    pub fn insert(&mut self, name: String) -> bool {
        self.0.insert(name, ()).is_none()
    }

    /// Whether `name` was in the set.
    pub fn remove(&mut self, name: &str) -> bool {
        self.0.remove(name).is_some()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The names in order.
    pub fn iter(&self) -> SetIter<'_> {
        self.0.iter().map(|(k, ())| k)
    }
}

/// The names of a `SmallSet` in order.
pub type SetIter<'a> = std::iter::Map<Iter<'a, ()>, fn((&'a String, &'a ())) -> &'a String>;

impl<'a> IntoIterator for &'a SmallSet {
    type Item = &'a String;
    type IntoIter = SetIter<'a>;
    fn into_iter(self) -> SetIter<'a> {
        self.iter()
    }
}

impl FromIterator<String> for SmallSet {
    fn from_iter<I: IntoIterator<Item = String>>(names: I) -> Self {
        SmallSet(names.into_iter().map(|n| (n, ())).collect())
    }
}

/// The entries of a `SmallMap` in key order.
pub enum Iter<'a, V> {
    Few(std::slice::Iter<'a, (String, V)>),
    Many(std::collections::btree_map::Iter<'a, String, V>),
}

impl<'a, V> Iterator for Iter<'a, V> {
    type Item = (&'a String, &'a V);
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Few(i) => i.next().map(|(k, v)| (k, v)),
            Iter::Many(i) => i.next(),
        }
    }
}

impl<'a, V> IntoIterator for &'a SmallMap<V> {
    type Item = (&'a String, &'a V);
    type IntoIter = Iter<'a, V>;
    fn into_iter(self) -> Iter<'a, V> {
        self.iter()
    }
}

/// Room for one more entry and no more: a `Vec` that grows by itself takes four slots for its
/// first entry, and nearly every list here keeps one or two.
fn grow_by_one<V>(v: &mut Vec<(String, V)>) {
    if v.len() == v.capacity() {
        v.reserve_exact(1);
    }
}

fn find<V>(v: &[(String, V)], key: &str) -> Result<usize, usize> {
    v.binary_search_by(|(k, _)| k.as_str().cmp(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grows_into_a_tree_and_shrinks_back_into_a_list() {
        let mut m = SmallMap::default();
        for i in 0..=FEW {
            assert_eq!(m.insert(format!("k{i:02}"), i), None);
        }
        assert!(matches!(m, SmallMap::Many(_)), "past {FEW} entries");
        assert_eq!(m.insert("k03".into(), 30), Some(3));
        for i in 0..=FEW / 2 {
            m.remove(&format!("k{i:02}"));
        }
        assert!(matches!(m, SmallMap::Few(_)), "back to a few entries");
        let keys: Vec<_> = m.keys().cloned().collect();
        assert_eq!(keys, ["k05", "k06", "k07", "k08"]);
    }

    #[test]
    fn a_list_holds_no_more_room_than_its_entries() {
        let mut m = SmallMap::default();
        for i in 0..FEW {
            m.insert(format!("k{i}"), i);
            let SmallMap::Few(v) = &m else {
                panic!("a list up to {FEW} entries")
            };
            assert_eq!(v.capacity(), i + 1);
        }
        let mut m: SmallMap<u32> = SmallMap::default();
        *m.entry_or_default("a") += 1;
        let SmallMap::Few(v) = &m else {
            panic!("one entry is a list")
        };
        assert_eq!(v.capacity(), 1);
    }

    #[test]
    fn equal_maps_compare_equal_whether_list_or_tree() {
        let entries = (0..6).map(|i| (format!("k{i}"), i));
        let list: SmallMap<u32> = entries.clone().collect();
        let tree = SmallMap::Many(entries.collect());
        assert!(matches!(list, SmallMap::Few(_)));
        assert_eq!(list, tree);
        let mut other = list.clone();
        other.insert("k0".into(), 9);
        assert_ne!(list, other);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8, u32),
        Remove(u8),
        Bump(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..24, any::<u16>()).prop_map(|(k, v)| Op::Insert(k, u32::from(v))),
            (0u8..24).prop_map(Op::Remove),
            (0u8..24).prop_map(Op::Bump),
        ]
    }

    proptest! {
        /// Any sequence of changes leaves the same entries, in the same order, as a BTreeMap.
        #[test]
        fn behaves_as_a_btree_map(ops in proptest::collection::vec(op(), 0..200)) {
            let mut small: SmallMap<u32> = SmallMap::default();
            let mut model: BTreeMap<String, u32> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        let k = format!("key-{k}");
                        prop_assert_eq!(small.insert(k.clone(), v), model.insert(k, v));
                    }
                    Op::Remove(k) => {
                        let k = format!("key-{k}");
                        prop_assert_eq!(small.remove(&k), model.remove(&k));
                    }
                    Op::Bump(k) => {
                        let k = format!("key-{k}");
                        *small.entry_or_default(&k) += 1;
                        *model.entry(k).or_default() += 1;
                    }
                }
                prop_assert_eq!(small.len(), model.len());
                let entries: Vec<_> = small.iter().map(|(k, v)| (k.clone(), *v)).collect();
                let expected: Vec<_> = model.iter().map(|(k, v)| (k.clone(), *v)).collect();
                prop_assert_eq!(entries, expected);
                for k in 0..24u8 {
                    let k = format!("key-{k}");
                    prop_assert_eq!(small.get(&k), model.get(&k));
                }
            }
        }
    }
}
