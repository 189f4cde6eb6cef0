//! What a copy attempt knows of the attempts before it under the same segment id.

/// Whether an earlier attempt may have left objects under a segment id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Earlier {
    /// None did: this copy created the id's manifest (a create-only PutObject the store
    /// enforces), and every attempt writes that manifest before its first object, and a
    /// delete removes it last.
    None,
    /// One may have: the manifest was there (or the store may ignore create-only writes).
    Maybe,
}
