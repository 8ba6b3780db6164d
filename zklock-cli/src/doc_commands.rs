//! Every `zklock` command line the documentation shows parses with the options as they are:
//! a renamed subcommand or flag fails this test, not a reader who copies the line.
//!
//! Read from the fenced blocks of README.md and docs/*.md, and from this crate's module docs:
//! lines that start with `zklock ` (or `$ zklock `). Synopsis notation is expanded: `[…]`
//! parts are taken as given, each alternative of `a|b` is tried, `…`/`...` ends a line, and
//! the placeholders `N` and `DURATION` stand for `2` and `5s`.

use clap::Parser;

use super::Cli;

/// The command lines of `text`'s fenced blocks (all lines of a Rust file's `//!` docs).
fn command_lines(text: &str, rust: bool) -> Vec<String> {
    // Inside a fence, and one of shell commands or their output (not TOML, Rust or JSON).
    let (mut fenced, mut shell) = (false, false);
    let mut lines = Vec::new();
    for line in text.lines() {
        let line = if rust {
            match line.strip_prefix("//!") {
                Some(doc) => doc.trim(),
                None => continue,
            }
        } else {
            line.trim()
        };
        if let Some(info) = line.strip_prefix("```") {
            fenced = !fenced;
            shell = fenced && matches!(info.trim(), "" | "sh" | "bash" | "shell" | "console" | "text");
            continue;
        }
        let line = line.strip_prefix("$ ").unwrap_or(line);
        // Output that starts with the command's name (`zklock doctor: …`) is not a command.
        let output = line.split_whitespace().nth(1).is_some_and(|w| w.ends_with(':'));
        if (shell || rust) && line.starts_with("zklock ") && !output {
            // A comment after the command is not part of it.
            let command = line.split("  #").next().unwrap_or(line).trim_end();
            lines.push(command.to_owned());
        }
    }
    lines
}

/// The words of a command line, as a shell splits them (quotes, no expansion).
fn words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut quote, mut started) = (Vec::new(), String::new(), None, false);
    for c in line.chars() {
        match (quote, c) {
            (None, '\'' | '"') => (quote, started) = (Some(c), true),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() => {
                if started {
                    words.push(std::mem::take(&mut word));
                    started = false;
                }
            }
            (_, c) => (word.push(c), started = true).1,
        }
    }
    if started {
        words.push(word);
    }
    words
}

/// The concrete command lines a synopsis stands for: brackets dropped (their contents kept),
/// one line per alternative of each `a|b|c` word outside quotes, cut at an ellipsis.
fn expand(line: &str) -> Vec<Vec<String>> {
    let mut variants = vec![Vec::new()];
    for word in words(&line.replace(['[', ']'], " ")) {
        if word.ends_with("...") || word.ends_with('…') {
            break;
        }
        // Placeholders that stand for a number or a duration.
        let word = match word.as_str() {
            "N" => "2".to_owned(),
            "DURATION" => "5s".to_owned(),
            _ => word,
        };
        let choices: Vec<&str> = if word.contains('|') && !word.contains(' ') && !word.starts_with('-') {
            word.split('|').collect()
        } else {
            vec![word.as_str()]
        };
        variants = variants
            .into_iter()
            .flat_map(|v| {
                choices.iter().map(move |c| {
                    let mut v = v.clone();
                    v.push((*c).to_owned());
                    v
                })
            })
            .collect();
    }
    variants
}

#[test]
fn every_documented_command_line_parses() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut sources = vec![
        (root.join("README.md"), false),
        (root.join("zklock-cli/src/main.rs"), true),
    ];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            sources.push((path, false));
        }
    }
    let (mut checked, mut refused) = (0, Vec::new());
    for (path, rust) in sources {
        let text = std::fs::read_to_string(&path).unwrap();
        for line in command_lines(&text, rust) {
            for args in expand(&line) {
                checked += 1;
                if let Err(err) = Cli::try_parse_from(&args) {
                    let why = err.to_string();
                    refused.push(format!(
                        "{}: `{line}` ({args:?}): {}",
                        path.display(),
                        why.lines().next().unwrap_or("")
                    ));
                }
            }
        }
    }
    assert!(
        checked >= 20,
        "only {checked} command lines found: the extraction is broken"
    );
    assert!(
        refused.is_empty(),
        "documented commands that do not parse:\n{}",
        refused.join("\n")
    );
}

#[test]
fn synopsis_notation_is_expanded() {
    assert_eq!(
        expand("zklock jobs pause|resume job [--yes]"),
        [
            ["zklock", "jobs", "pause", "job", "--yes"],
            ["zklock", "jobs", "resume", "job", "--yes"]
        ]
    );
    assert_eq!(
        expand("zklock exec a -- sh -c 'a | b' ARGS..."),
        [["zklock", "exec", "a", "--", "sh", "-c", "a | b"]]
    );
    assert_eq!(
        command_lines(
            "text\n```\n$ zklock show x   # who holds x\n```\nzklock outside\n",
            false
        ),
        ["zklock show x"]
    );
}
