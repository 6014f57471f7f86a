//! The reference interpreter over IR modules (issue 3). Not yet written.
