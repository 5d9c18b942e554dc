//! One ordering for event priorities from both protocol versions.
//!
//! They disagree. 2.0b: lower number = higher priority, `1` is the highest, and `0` means *no*
//! priority (the lowest). 3.x: `0` is the highest and an absent priority is the lowest (User
//! Guide §7.1). [`Precedence`] puts both on one scale where the smaller value wins: 3.x `p` →
//! `p`, 2.0b `n ≥ 1` → `n − 1` (so 2.0b 1 ≡ 3.x 0), and 3.x `null` / 2.0b `0` → [`Precedence::LOWEST`].

/// A priority on a common scale: smaller wins. Sort events ascending to get the one that
/// applies first when they conflict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Precedence(u64);

impl Precedence {
    /// The highest priority (3.x `0`, 2.0b `1`).
    pub const HIGHEST: Precedence = Precedence(0);
    /// The lowest: no priority given (3.x `null`, 2.0b `0`).
    pub const LOWEST: Precedence = Precedence(u64::MAX);

    /// From a 3.x `priority` field.
    pub fn from_oadr3(priority: Option<u32>) -> Precedence {
        priority.map_or(Precedence::LOWEST, |p| Precedence(u64::from(p)))
    }

    /// From a 2.0b `ei:priority`.
    pub fn from_oadr2b(priority: u32) -> Precedence {
        if priority == 0 {
            Precedence::LOWEST
        } else {
            Precedence(u64::from(priority) - 1)
        }
    }

    /// The rank on the common scale (0 = highest, `u64::MAX` = none given).
    pub fn rank(self) -> u64 {
        self.0
    }
}
