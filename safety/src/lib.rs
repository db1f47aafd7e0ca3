//! Safety suite (in progress).
