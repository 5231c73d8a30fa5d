//! prescientd.toml(5), generated. Two sources, each the truth for its part:
//! the parser (`config.rs`) says which keys exist (the serde fields of
//! `Config`, read by serialising its defaults: the same derive that
//! deserialises with `deny_unknown_fields`), and the shipped sample
//! (packaging/prescientd.toml, tested in config.rs to parse to exactly the
//! defaults) gives each key its default as written and the comment above it.
//! So a key added to the parser without a comment in the sample fails
//! `render` (and its test), and the page never lists a key the parser
//! refuses.

use crate::config::Config;
use std::fmt::Write;

/// The sample configuration: every key, its default and its comment.
pub const SAMPLE: &str = include_str!("../../packaging/prescientd.toml");

/// Keys set on consecutive lines under one comment (`max_connections`,
/// `max_connections_per_uid`, `idle_timeout_ms`), with that comment.
#[derive(Debug, Default)]
pub struct Group {
    /// (dotted key, default as the sample writes it)
    pub keys: Vec<(String, String)>,
    /// Comment lines; "" separates paragraphs.
    pub doc: Vec<String>,
}

/// A table of the file (`[control]`), or the top level ("").
#[derive(Debug, Default)]
pub struct Section {
    pub name: String,
    /// The comment before a bare `#` line right under the header.
    pub intro: Vec<String>,
    pub groups: Vec<Group>,
}

/// The sample, read as documentation.
#[derive(Debug, Default)]
pub struct Doc {
    /// The file's first comment block (up to the first blank line).
    pub intro: Vec<String>,
    pub sections: Vec<Section>,
}

/// Every dotted key the parser accepts (`engine.rows`), in its order.
pub fn parser_keys() -> Vec<String> {
    // Config's defaults always serialise (plain data, no maps with
    // non-string keys); an empty list would fail every test below.
    match toml::Value::try_from(Config::default()) {
        Ok(toml::Value::Table(t)) => crate::config::dotted_keys(&t),
        _ => Vec::new(),
    }
}

/// Reads the sample's comments and keys (see [`Doc`]).
pub fn parse(text: &str) -> Doc {
    let mut doc = Doc {
        sections: vec![Section::default()],
        ..Default::default()
    };
    let mut pending: Vec<String> = Vec::new();
    let mut after_key = false;
    let mut seen_any = false;
    for line in text.lines().map(str::trim) {
        let sec = doc.sections.last_mut().expect("one section at least");
        if line.is_empty() {
            if !seen_any && doc.intro.is_empty() {
                doc.intro = std::mem::take(&mut pending);
            }
            after_key = false;
        } else if line == "#" {
            if sec.groups.is_empty() && sec.intro.is_empty() && !sec.name.is_empty() {
                sec.intro = std::mem::take(&mut pending);
            } else {
                pending.push(String::new());
            }
        } else if let Some(c) = line.strip_prefix('#') {
            pending.push(c.strip_prefix(' ').unwrap_or(c).to_string());
            after_key = false;
        } else if line.starts_with('[') && line.ends_with(']') {
            let name = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_string();
            doc.sections.push(Section {
                name,
                ..Default::default()
            });
            seen_any = true;
            after_key = false;
        } else if let Some((k, v)) = line.split_once('=') {
            let key = match sec.name.as_str() {
                "" => k.trim().to_string(),
                s => format!("{s}.{}", k.trim()),
            };
            if !(after_key && pending.is_empty()) || sec.groups.is_empty() {
                sec.groups.push(Group {
                    doc: std::mem::take(&mut pending),
                    ..Default::default()
                });
            }
            let g = sec.groups.last_mut().expect("pushed above");
            g.keys.push((key, v.trim().to_string()));
            seen_any = true;
            after_key = true;
        }
    }
    doc
}

/// roff text: backslashes escaped, a leading `.` or `'` kept literal.
fn roff(line: &str) -> String {
    let s = line.replace('\\', "\\e");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}

/// Comment lines as roff paragraphs.
fn paragraphs(out: &mut String, lines: &[String]) {
    for l in lines {
        if l.is_empty() {
            out.push_str(".PP\n");
        } else {
            out.push_str(&roff(l));
            out.push('\n');
        }
    }
}

/// The page, or the parser's keys that the sample does not document.
pub fn render(version: &str) -> Result<String, String> {
    render_doc(&parse(SAMPLE), version)
}

/// The page of `doc` (the sample, read by [`parse`]).
pub fn render_doc(doc: &Doc, version: &str) -> Result<String, String> {
    let documented: Vec<&str> = doc
        .sections
        .iter()
        .flat_map(|s| &s.groups)
        .filter(|g| !g.doc.is_empty())
        .flat_map(|g| g.keys.iter().map(|(k, _)| k.as_str()))
        .collect();
    let missing: Vec<String> = parser_keys()
        .into_iter()
        .filter(|k| !documented.contains(&k.as_str()))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "keys the parser accepts without a comment in packaging/prescientd.toml: {}",
            missing.join(", ")
        ));
    }
    let mut out = String::new();
    let _ = write!(
        out,
        ".TH PRESCIENTD.TOML 5 \"\" \"prescientd {version}\" \"File Formats\"\n\
.SH NAME\nprescientd.toml \\- configuration file of prescientd(8)\n\
.SH SYNOPSIS\n\\fI{}\\fR\n.SH DESCRIPTION\n",
        crate::config::DEFAULT_PATH
    );
    paragraphs(&mut out, &doc.intro);
    out.push_str(".PP\nThe file is TOML. Every key is optional; each is listed below with its default, under the name (\\fIsection.key\\fR) that error messages and \\fBprescientctl status\\fR use. An unknown key or a value out of range is refused with \\fIfile\\fR:\\fIline\\fR: \\fIkey\\fR: \\fImessage\\fR, and \\fBprescientd service \\-\\-check\\-config\\fR exits 78.\n.SH KEYS\n");
    for s in &doc.sections {
        match s.name.as_str() {
            "" => out.push_str(".SS Top level\n"),
            n => {
                let _ = writeln!(out, ".SS [{n}]");
            }
        }
        paragraphs(&mut out, &s.intro);
        for g in &s.groups {
            for (i, (k, v)) in g.keys.iter().enumerate() {
                out.push_str(if i == 0 { ".TP\n" } else { ".TQ\n" });
                let _ = writeln!(out, "\\fB{}\\fR = {}", roff(k), roff(v));
            }
            paragraphs(&mut out, &g.doc);
        }
    }
    out.push_str(".SH FILES\n.TP\n/etc/prescient/prescientd.toml\nThe file \\fBprescientd service\\fR reads by default (\\-\\-config names another).\n.TP\n/usr/share/doc/prescient/README.md\nInstalling, the two backends, running as a service.\n.SH SEE ALSO\n\\fBprescientd\\fR(8), \\fBprescientd\\-service\\fR(8), \\fBprescientctl\\fR(1), \\fBprescientctl\\-status\\fR(1)\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> String {
        render("test").expect("every key documented")
    }

    /// The KEYS section's items read back from the roff: (key, its text),
    /// a key of a `.TQ` group getting the group's text.
    fn items(page: &str) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let mut group = 0;
        let mut prev = "";
        let keys = page.split("\n.SH KEYS\n").nth(1).unwrap_or_default();
        for l in keys.lines().take_while(|l| !l.starts_with(".SH")) {
            if prev == ".TP" || prev == ".TQ" {
                if prev == ".TP" {
                    group = out.len();
                }
                let key = l.strip_prefix("\\fB").and_then(|r| r.split_once("\\fR = "));
                out.push((
                    key.map_or(String::new(), |(k, _)| k.to_string()),
                    String::new(),
                ));
            } else if l.starts_with(".S") || l == ".TP" {
                group = out.len();
            } else if !l.starts_with('.') && group < out.len() {
                for it in &mut out[group..] {
                    it.1.push_str(l);
                    it.1.push(' ');
                }
            }
            prev = l;
        }
        out
    }

    /// Issue 18: every key the parser accepts has an item, with text.
    #[test]
    fn every_key_the_parser_accepts_is_documented() {
        let items = items(&page());
        let keys = parser_keys();
        assert!(keys.len() > 30, "{keys:?}");
        for k in &keys {
            let (_, text) = items
                .iter()
                .find(|(i, _)| i == k)
                .unwrap_or_else(|| panic!("{k} has no item"));
            assert!(text.split_whitespace().count() >= 3, "{k}: {text:?}");
        }
        assert_eq!(items.len(), keys.len(), "{items:?}");
    }

    /// The other way: every key the page lists is one the parser takes,
    /// with the default the page shows; a misspelling of it is refused.
    #[test]
    fn every_documented_key_is_accepted_with_its_shown_default() {
        let doc = parse(SAMPLE);
        let mut n = 0;
        for (k, v) in doc
            .sections
            .iter()
            .flat_map(|s| &s.groups)
            .flat_map(|g| &g.keys)
        {
            let (text, bad) = match k.rsplit_once('.') {
                Some((s, name)) => (
                    format!("[{s}]\n{name} = {v}"),
                    format!("[{s}]\n{name}x = {v}"),
                ),
                None => (format!("{k} = {v}"), format!("{k}x = {v}")),
            };
            let c = Config::parse(&text).unwrap_or_else(|e| panic!("{k} = {v}: {e}"));
            assert_eq!(c, Config::default(), "{k} = {v} is not the default");
            assert!(Config::parse(&bad).is_err(), "{bad} accepted");
            n += 1;
        }
        assert_eq!(n, parser_keys().len());
    }

    #[test]
    fn the_page_has_the_sections_man_needs() {
        let p = page();
        for s in [
            ".TH PRESCIENTD.TOML 5",
            ".SH NAME",
            ".SH SYNOPSIS",
            ".SH DESCRIPTION",
            ".SH KEYS",
            ".SS [engine]",
            ".SH SEE ALSO",
        ] {
            assert!(p.contains(s), "{s}");
        }
        // The [userspace] table's own text is its intro, not a key's.
        let us = p.split(".SS [userspace]\n").nth(1).unwrap();
        assert!(us.starts_with("Only read with backend"), "{us}");
        let requests = [".TH", ".SH", ".SS", ".TP", ".TQ", ".PP"];
        for l in p.lines().filter(|l| l.starts_with('.')) {
            assert!(
                requests.iter().any(|r| l.starts_with(r)),
                "stray request: {l}"
            );
        }
    }

    /// A key the parser accepts but the sample leaves without a comment:
    /// no page, and the key named.
    #[test]
    fn a_key_without_its_comment_is_refused_by_name() {
        let sample = SAMPLE.replace("# Correlation table rows (power of two, 1..=65536).\n", "");
        assert_ne!(sample, SAMPLE);
        let e = render_doc(&parse(&sample), "test").unwrap_err();
        assert!(e.ends_with(": engine.rows"), "{e}");
    }
}
