//! Support code for the black-box tests.
