//! What a scan or a verification of a segment reports as wrong: below both.

/// A problem found in a segment: where it starts and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentProblem {
    /// Byte position of the first bad batch in the `.log` file.
    pub position: u64,
    /// What is wrong with it.
    pub reason: String,
}
