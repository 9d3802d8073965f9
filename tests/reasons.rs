//! The table of condition and event reasons in docs/reference.md is what a person on call reads: this test
//! keeps it complete and current. Reasons are string literals scattered over the controllers
//! (`Note::warning("...")`, `out.fail("...")`, `reason: "..."`, constants), so the test reads the
//! source: every CamelCase literal in the controllers' and the shared runtime's non-test code is
//! either a row of the table or listed below as not a reason; every row of the table is a literal
//! the code still writes.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// CamelCase literals in controller code that are not reasons: backend error codes keeper
/// creates or matches (they appear inside a reason's message), and IAM policy statement ids.
const NOT_REASONS: &[&str] = &[
    // StorageGRID / S3 error codes keeper matches or raises inside a `BackendError` message.
    "AccountNotOwned",
    "AccountsMarkedTwice",
    "RecordedAccountGone",
    "TenantChanged",
    "BadCredentials",
    "CreatedMeanwhile",
    "GroupMissing",
    "NothingDeleted",
    "SharedCredentials",
    "UserMissing",
    // IAM error code keeper matches (a user that still has keys).
    "DeleteConflict",
    // S3 error codes by which a store says it does not know a key set (`CredentialsNotYetValid`).
    "InvalidAccessKeyId",
    "InvalidToken",
    "SignatureDoesNotMatch",
    // Statement ids of the per-bucket key policy.
    "ListThisBucket",
    "ObjectsOfThisBucket",
    // S3 actions a bucket key policy denies.
    "DeleteBucket",
    "PutBucketPolicy",
];

/// The file that holds the table, from the repository root, and the heading it comes under.
const REASONS_DOC: &str = "docs/reference.md";
const REASONS_SECTION: &str = "## Condition and event reasons";

/// The checkout under test, read when the test runs: a binary cargo reuses from another checkout
/// of the same shared target dir would otherwise read that checkout.
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("run by cargo")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs")
            && path.file_name().is_some_and(|n| n != "tests.rs")
        {
            out.push(path);
        }
    }
}

/// The file's code without comment lines and without its inline test module (which comes last in
/// this codebase; `mod tests;` declarations point at files skipped anyway).
fn non_test_code(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap();
    let code = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => &text,
    };
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every string literal in `code` (escapes are rare in reasons and never needed here).
fn literals(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(start) = rest.find('"') {
        let after = &rest[start + 1..];
        let mut end = 0;
        let bytes = after.as_bytes();
        while end < bytes.len() && bytes[end] != b'"' {
            end += if bytes[end] == b'\\' { 2 } else { 1 };
        }
        if end >= bytes.len() {
            break;
        }
        out.push(&after[..end]);
        rest = &after[end + 1..];
    }
    out
}

/// `BucketNotEmpty`, `TenantNotReady`: two or more capitalised words, letters and digits only.
fn is_camel_case(s: &str) -> bool {
    let starts_upper = s.chars().next().is_some_and(|c| c.is_ascii_uppercase());
    let alnum = s.chars().all(|c| c.is_ascii_alphanumeric());
    let capitals = s.chars().filter(|c| c.is_ascii_uppercase()).count();
    let lower = s.chars().any(|c| c.is_ascii_lowercase());
    starts_upper && alnum && capitals >= 2 && lower && !s.contains("ID")
}

fn documented_reasons() -> BTreeSet<String> {
    let doc = fs::read_to_string(Path::new(&manifest_dir()).join(REASONS_DOC)).expect(REASONS_DOC);
    let start = doc
        .find(REASONS_SECTION)
        .unwrap_or_else(|| panic!("{REASONS_DOC} lacks the section {REASONS_SECTION:?}"));
    let section = &doc[start + REASONS_SECTION.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`').map(|(reason, _)| reason.to_string()))
        .collect()
}

#[test]
fn reference_lists_every_reason() {
    let root = Path::new(&manifest_dir()).join("src");
    let documented = documented_reasons();
    assert!(documented.len() > 40, "table not found: {documented:?}");

    let mut controller_files = Vec::new();
    rust_files(&root.join("controllers"), &mut controller_files);
    rust_files(&root.join("runtime"), &mut controller_files);
    let mut undocumented = BTreeSet::new();
    for path in &controller_files {
        for lit in literals(&non_test_code(path)) {
            if is_camel_case(lit) && !documented.contains(lit) && !NOT_REASONS.contains(&lit) {
                undocumented.insert(format!("{lit} ({})", path.display()));
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "reasons written by the code but missing from {REASONS_DOC}'s {REASONS_SECTION:?} table (add a \
         row with what it means and what to do, or list it in NOT_REASONS if it is not a \
         reason): {undocumented:#?}"
    );

    let mut all_files = Vec::new();
    rust_files(&root, &mut all_files);
    // kubectl-keeper reads reasons to choose its next command; it writes none, so its literals
    // must not keep a row alive that no controller writes any more.
    all_files.retain(|p| !p.starts_with(root.join("plugin")));
    let written: BTreeSet<String> = all_files
        .iter()
        .flat_map(|p| {
            literals(&non_test_code(p))
                .into_iter()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    let stale: Vec<_> = documented.difference(&written).collect();
    assert!(
        stale.is_empty(),
        "{REASONS_DOC}'s {REASONS_SECTION:?} table lists reasons no code writes any more: {stale:?}"
    );
}

#[test]
fn the_scanner_finds_literals_and_camel_case() {
    assert_eq!(
        literals(r#"Note::warning("BucketNotEmpty", "a \"quoted\" b") x"#),
        ["BucketNotEmpty", r#"a \"quoted\" b"#]
    );
    assert!(is_camel_case("TenantNotReady"));
    assert!(
        !is_camel_case("Ready"),
        "one word: checked only table to code"
    );
    assert!(!is_camel_case("keeper.dev/drain"));
}
