//! Resident memory of a worker and all its descendants, read from `/proc`.

use std::collections::BTreeSet;

/// The pid and every live descendant of it.
pub fn process_tree(pid: i32) -> BTreeSet<i32> {
    let mut tree = BTreeSet::new();
    let mut stack = vec![pid];
    while let Some(p) = stack.pop() {
        if !tree.insert(p) {
            continue;
        }
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            stack.extend(
                children
                    .split_whitespace()
                    .filter_map(|c| c.parse::<i32>().ok()),
            );
        }
    }
    tree
}

/// Resident set size of one process in bytes (`VmRSS`), `None` once it is gone.
pub fn rss_bytes(pid: i32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Summed RSS of `pid` and its descendants.
pub fn tree_rss_bytes(pid: i32) -> (u64, BTreeSet<i32>) {
    let tree = process_tree(pid);
    let total = tree.iter().filter_map(|p| rss_bytes(*p)).sum();
    (total, tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_this_process() {
        let (rss, tree) = tree_rss_bytes(std::process::id() as i32);
        assert!(
            rss > 1024 * 1024,
            "a test process uses more than 1 MiB: {rss}"
        );
        assert!(tree.contains(&(std::process::id() as i32)));
    }
}
