//! The real Python with PyPI `datasets` (and so `huggingface_hub`), for the compatibility
//! tests: `GEN_TEST_PYTHON` names it (`scripts/test.sh` installs a venv and sets it).

/// The Python to run, or `None` (printing why) when the test may skip; panics instead when
/// `GEN_REQUIRE_PYTHON_DATASETS=1` (as `scripts/test.sh` sets), so CI never skips.
pub fn with_datasets() -> Option<String> {
    match std::env::var("GEN_TEST_PYTHON") {
        Ok(python) if !python.is_empty() => Some(python),
        _ if std::env::var("GEN_REQUIRE_PYTHON_DATASETS").as_deref() == Ok("1") => {
            panic!("GEN_REQUIRE_PYTHON_DATASETS=1 but GEN_TEST_PYTHON is not set")
        }
        _ => {
            eprintln!(
                "skipping the Python `datasets` check: GEN_TEST_PYTHON is not set (scripts/test.sh sets it)"
            );
            None
        }
    }
}
