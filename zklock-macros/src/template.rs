//! The lock-name template: `"inventory:{sku}"`, `"order:{order.id}"`, `"cache:{self.region}"`.
//!
//! A placeholder names a function argument (or `self`), optionally followed by fields, and
//! optionally a format spec after `:` as in `format!`. `{{` and `}}` stand for braces.
//! Placeholders are checked against the function's parameters at compile time, and the fixed
//! text against the rules for lock names; errors point into the literal where the compiler
//! allows it (otherwise at the literal, naming the culprit).

use std::ops::Range;

use proc_macro2::{Span, TokenStream};
use quote::quote_spanned;
use syn::ext::IdentExt;
use syn::{FnArg, Ident, LitStr, Pat, Signature};

/// The longest lock name, in bytes (the runtime's `MAX_NAME_LEN`).
pub const MAX_NAME_LEN: usize = 200;

/// One `{…}` in the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    /// `sku`, `self`, … (a raw identifier without its `r#`).
    pub root: String,
    /// `id` in `{order.id}`; may be tuple indices such as `0` (raw identifiers without `r#`).
    pub fields: Vec<String>,
    /// The format spec after `:`, without the colon.
    pub spec: Option<String>,
    /// Parameters the spec takes a width or precision from (`w` in `{id:>w$}`).
    pub spec_args: Vec<String>,
    /// Byte range of the whole `{…}` in the literal's value.
    pub range: Range<usize>,
}

/// A piece of a parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Literal text (braces already unescaped).
    Text(String),
    /// A placeholder.
    Hole(Placeholder),
}

/// A parsed lock-name template.
#[derive(Debug, Clone)]
pub struct Template {
    pub lit: LitStr,
    pub pieces: Vec<Piece>,
}

/// Why a template is malformed, with the byte range of the offending part of the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateError {
    pub message: String,
    pub range: Range<usize>,
}

/// Parses the value of a template literal.
pub fn parse_pieces(value: &str) -> Result<Vec<Piece>, TemplateError> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' if bytes.get(i + 1) == Some(&b'{') => {
                text.push('{');
                i += 2;
            }
            b'}' if bytes.get(i + 1) == Some(&b'}') => {
                text.push('}');
                i += 2;
            }
            b'}' => {
                return Err(TemplateError {
                    message: "unmatched `}` in lock name; write `}}` for a literal brace".into(),
                    range: i..i + 1,
                })
            }
            b'{' => {
                let Some(len) = value[i..].find('}') else {
                    return Err(TemplateError {
                        message: "unclosed `{` in lock name; write `{{` for a literal brace".into(),
                        range: i..value.len(),
                    });
                };
                let range = i..i + len + 1;
                let hole = parse_placeholder(&value[i + 1..i + len], range.clone())?;
                if !text.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut text)));
                }
                pieces.push(Piece::Hole(hole));
                i = range.end;
            }
            _ => {
                let ch = value[i..].chars().next().expect("in bounds");
                text.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

fn parse_placeholder(inner: &str, range: Range<usize>) -> Result<Placeholder, TemplateError> {
    let fail = |message: String| TemplateError {
        message,
        range: range.clone(),
    };
    let (path, spec) = match inner.split_once(':') {
        Some((path, spec)) => (path.trim(), Some(spec)),
        None => (inner.trim(), None),
    };
    if path.is_empty() {
        return Err(fail(
            "empty placeholder `{}` in lock name; name a function argument, as in `{id}`".into(),
        ));
    }
    let mut parts = path.split('.');
    let root = parts.next().unwrap_or_default();
    let root = if root == "self" {
        root.to_owned()
    } else {
        ident_name(root).ok_or_else(|| {
            fail(format!(
                "placeholder `{{{inner}}}` in lock name must start with an argument name, as in `{{id}}` or `{{order.id}}`"
            ))
        })?
    };
    let mut fields = Vec::new();
    for field in parts {
        // A tuple index as Rust reads it: a `u32` without leading zeros.
        let name = if field.parse::<u32>().is_ok_and(|index| index.to_string() == field) {
            Some(field.to_owned())
        } else {
            ident_name(field)
        };
        let Some(name) = name else {
            return Err(fail(format!(
                "`{field}` in placeholder `{{{inner}}}` is not a field name"
            )));
        };
        fields.push(name);
    }
    let spec_args = match spec {
        Some(spec) => check_spec(spec).map_err(|message| {
            // The spec starts after `{`, the path and `:`.
            let start = range.start + 1 + inner.len() - spec.len();
            TemplateError {
                message: format!("bad format spec `{spec}` in placeholder `{{{inner}}}`: {message}"),
                range: start..start + spec.len(),
            }
        })?,
        None => Vec::new(),
    };
    Ok(Placeholder {
        root,
        fields,
        spec: spec.map(str::to_owned),
        spec_args,
        range,
    })
}

/// Checks a `format!` spec (the part after `:`) and returns the parameters it names for a
/// width or precision (`w` in `>w$`). The grammar is `format!`'s:
/// `[[fill]align][sign]['#']['0'][width]['.' precision][type]`.
fn check_spec(spec: &str) -> Result<Vec<String>, String> {
    const EXAMPLES: &str = "write a spec as in `format!`, such as `{id:08}`, `{id:>12}` or `{id:x}`";
    let chars: Vec<char> = spec.chars().collect();
    let mut i = 0;
    let is_align = |c: Option<&char>| matches!(c, Some('<' | '^' | '>'));
    if is_align(chars.get(1)) {
        i = 2;
    } else if is_align(chars.first()) {
        i = 1;
    }
    if matches!(chars.get(i), Some('+' | '-')) {
        i += 1;
    }
    if chars.get(i) == Some(&'#') {
        i += 1;
    }
    if chars.get(i) == Some(&'0') && chars.get(i + 1) != Some(&'$') {
        i += 1;
    }
    let mut args = Vec::new();
    let mut count = |i: &mut usize, what: &str| -> Result<(), String> {
        let start = *i;
        while chars.get(*i).is_some_and(|c| c.is_ascii_digit()) {
            *i += 1;
        }
        if *i > start {
            if chars.get(*i) == Some(&'$') {
                return Err(format!(
                    "a positional {what} (`{}$`) cannot be used in a lock name; write the number, or a parameter name followed by `$`",
                    chars[start..*i].iter().collect::<String>()
                ));
            }
            return Ok(());
        }
        // `name$`: a parameter holds the count. Anything else here is the type, read below.
        let mut end = start;
        while chars
            .get(end)
            .is_some_and(|&c| c == '_' || unicode_ident::is_xid_continue(c))
        {
            end += 1;
        }
        if end > start && chars.get(end) == Some(&'$') {
            let name: String = chars[start..end].iter().collect();
            if ident_name(&name).is_none() {
                return Err(format!("`{name}$` does not name a parameter"));
            }
            args.push(name);
            *i = end + 1;
        }
        Ok(())
    };
    count(&mut i, "width")?;
    if chars.get(i) == Some(&'.') {
        i += 1;
        if chars.get(i) == Some(&'*') {
            return Err(
                "`.*` takes the precision from an extra argument, which a lock name does not have; write the number, or a parameter name followed by `$`"
                    .into(),
            );
        }
        let before = i;
        count(&mut i, "precision")?;
        if i == before {
            return Err(format!("expected a precision after `.`; {EXAMPLES}"));
        }
    }
    let kind: String = chars[i..].iter().collect();
    match kind.as_str() {
        "" | "?" | "x?" | "X?" | "o" | "x" | "X" | "p" | "b" | "e" | "E" => Ok(args),
        other => Err(format!(
            "unknown format `{other}`; {EXAMPLES} (types: `?`, `x`, `X`, `o`, `b`, `e`, `E`, `p`)"
        )),
    }
}

/// The name of an identifier written `name` or `r#name`, without the `r#`, if it is one.
fn ident_name(s: &str) -> Option<String> {
    let bare = s.strip_prefix("r#").unwrap_or(s);
    let mut chars = bare.chars();
    let first = chars.next()?;
    let valid = (first == '_' || unicode_ident::is_xid_start(first))
        && chars.all(unicode_ident::is_xid_continue)
        && bare != "_"
        && !matches!(bare, "self" | "Self" | "super" | "crate");
    valid.then(|| bare.to_owned())
}

/// Rust's keywords, which must be written `r#name` to be used as an identifier.
const KEYWORDS: &[&str] = &[
    "abstract", "as", "async", "await", "become", "box", "break", "const", "continue", "do", "dyn", "else", "enum",
    "extern", "false", "final", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "macro", "match", "mod", "move",
    "mut", "override", "priv", "pub", "ref", "return", "static", "struct", "trait", "true", "try", "type", "typeof",
    "unsafe", "unsized", "use", "virtual", "where", "while", "yield",
];

/// The identifier for a name without `r#`, raw when it is a keyword.
fn make_ident(name: &str, span: Span) -> Ident {
    if KEYWORDS.contains(&name) {
        Ident::new_raw(name, span)
    } else {
        Ident::new(name, span)
    }
}

/// How a name is shown in messages: as it would be written in code.
fn shown(name: &str) -> String {
    if KEYWORDS.contains(&name) {
        format!("r#{name}")
    } else {
        name.to_owned()
    }
}

/// The span of `range` (bytes of the literal's value) in the source, when the compiler can
/// give one; otherwise the whole literal.
pub fn subspan(lit: &LitStr, range: Range<usize>) -> Span {
    let source = lit.token().to_string();
    let value = lit.value();
    // Offsets in the value map onto the source only when the value is written verbatim
    // (no escapes) after the opening quote (`"…"` or `r#"…"#`).
    if let Some(quote) = source.find('"') {
        let start = quote + 1;
        if source[start..].starts_with(&value) {
            if let Some(span) = lit.token().subspan(start + range.start..start + range.end) {
                return span;
            }
        }
    }
    lit.span()
}

/// Why ZooKeeper refuses `c` in a node name (the runtime's `validate_name` agrees).
pub fn forbidden_char(c: char) -> Option<&'static str> {
    match c {
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => Some("a control character"),
        '\u{e000}'..='\u{f8ff}' => Some("a private-use character"),
        '\u{fff0}'..='\u{ffff}' => Some("a special or non-character code point"),
        c if c > '\u{ffff}' => Some(
            "a character outside the Basic Multilingual Plane (emoji and the like): ZooKeeper's Java \
             side stores it as a surrogate pair, which node names may not contain",
        ),
        _ => None,
    }
}

/// Checks the fixed text of a template against the rules for lock names: the parts that do
/// not depend on the arguments. Errors carry the range of the offending part.
fn check_fixed_text(value: &str, pieces: &[Piece]) -> Result<(), TemplateError> {
    let holes: Vec<Range<usize>> = pieces
        .iter()
        .filter_map(|piece| match piece {
            Piece::Hole(hole) => Some(hole.range.clone()),
            Piece::Text(_) => None,
        })
        .collect();
    for (at, c) in value.char_indices() {
        if holes.iter().any(|hole| hole.contains(&at)) {
            continue;
        }
        let range = at..at + c.len_utf8();
        if c == '/' {
            return Err(TemplateError {
                message: "a lock name is a single ZooKeeper path segment and cannot contain `/`; \
                          use another separator such as `:`"
                    .into(),
                range,
            });
        }
        if let Some(why) = forbidden_char(c) {
            return Err(TemplateError {
                message: format!(
                    "a lock name cannot contain `{}` (U+{:04X}), {why}",
                    c.escape_debug(),
                    u32::from(c)
                ),
                range,
            });
        }
    }
    let fixed: usize = pieces
        .iter()
        .map(|piece| match piece {
            Piece::Text(text) => text.len(),
            Piece::Hole(_) => 0,
        })
        .sum();
    let whole = 0..value.len();
    if fixed > MAX_NAME_LEN {
        let message = if holes.is_empty() {
            format!("the lock name is {fixed} bytes long; a lock name is at most {MAX_NAME_LEN} bytes")
        } else {
            format!(
                "the fixed text of the lock name is already {fixed} bytes long; a lock name is at most {MAX_NAME_LEN} bytes"
            )
        };
        return Err(TemplateError { message, range: whole });
    }
    if let [Piece::Text(text)] = pieces {
        if text == "." || text == ".." {
            return Err(TemplateError {
                message: format!("`{text}` cannot be a lock name: ZooKeeper reserves `.` and `..`"),
                range: whole,
            });
        }
    }
    Ok(())
}

/// The names a template may refer to, and how the generated code spells them.
pub struct Scope {
    /// The function's name, for messages.
    fn_name: String,
    /// `self` for a receiver, and every binding of the parameters' patterns (without `r#`), in
    /// the order they are written: messages list them as the signature reads.
    names: Vec<String>,
    /// The binding that stands for `self` where the name is computed (`__self` inside an
    /// `#[async_trait]` method's future), if not `self` itself.
    pub self_alias: Option<Ident>,
}

impl Scope {
    /// The parameters of `sig`.
    pub fn of(sig: &Signature) -> Scope {
        let mut names = Vec::new();
        for input in &sig.inputs {
            match input {
                FnArg::Receiver(_) => names.push("self".to_owned()),
                FnArg::Typed(typed) => collect_bindings(&typed.pat, &mut names),
            }
        }
        Scope {
            fn_name: sig.ident.to_string(),
            names,
            self_alias: None,
        }
    }

    /// Adds the bindings of `pat`.
    pub fn add(&mut self, pat: &Pat) {
        collect_bindings(pat, &mut self.names);
    }

    /// Drops a name the user cannot write (a binding generated by another macro).
    pub fn remove(&mut self, name: &str) {
        self.names.retain(|known| known != name);
    }

    /// Whether `name` (without `r#`) is a parameter.
    pub fn contains(&self, name: &str) -> bool {
        self.names.iter().any(|known| known == name)
    }

    /// The `self` expression, spelled for where the name is computed.
    pub fn self_expr(&self, span: Span) -> TokenStream {
        match &self.self_alias {
            Some(alias) => {
                let alias = Ident::new(&alias.to_string(), span);
                quote_spanned!(span=> #alias)
            }
            None => quote_spanned!(span=> self),
        }
    }

    fn unknown_message(&self, root: &str) -> String {
        let name = &self.fn_name;
        if root == "self" {
            return format!("placeholder `{{self…}}` in lock name, but `{name}` has no `self` parameter");
        }
        let known: Vec<String> = self.names.iter().map(|p| format!("`{}`", shown(p))).collect();
        let known = if known.is_empty() {
            format!("`{name}` has no parameters")
        } else {
            format!("the parameters of `{name}` are {}", known.join(", "))
        };
        let root = shown(root);
        format!("unknown placeholder `{{{root}}}` in lock name: `{root}` is not a parameter ({known})")
    }
}

impl Template {
    /// Parses and checks a template literal on its own (not yet against the parameters).
    pub fn parse(lit: LitStr) -> syn::Result<Template> {
        let value = lit.value();
        if value.is_empty() {
            return Err(syn::Error::new(lit.span(), "the lock name is empty"));
        }
        let pieces = parse_pieces(&value)
            .and_then(|pieces| check_fixed_text(&value, &pieces).map(|()| pieces))
            .map_err(|e| syn::Error::new(subspan(&lit, e.range), e.message))?;
        Ok(Template { lit, pieces })
    }

    /// Checks every placeholder against the parameters and builds the `format!` string and
    /// its arguments (positional ones, then `name = name` for widths and precisions).
    pub fn format_args(&self, scope: &Scope) -> syn::Result<(String, Vec<TokenStream>)> {
        let mut fmt = String::new();
        let mut args = Vec::new();
        let mut named: Vec<(String, Span)> = Vec::new();
        let mut errors: Option<syn::Error> = None;
        let mut fail = |err: syn::Error| match &mut errors {
            Some(errors) => errors.combine(err),
            None => errors = Some(err),
        };
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => fmt.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Piece::Hole(hole) => {
                    let span = subspan(&self.lit, hole.range.clone());
                    if !scope.contains(&hole.root) {
                        fail(syn::Error::new(span, scope.unknown_message(&hole.root)));
                        continue;
                    }
                    for arg in &hole.spec_args {
                        if !scope.contains(arg) {
                            fail(syn::Error::new(
                                span,
                                format!(
                                    "`{arg}$` in placeholder `{}` takes a width or precision from `{arg}`, which is not a parameter",
                                    &self.lit.value()[hole.range.clone()]
                                ),
                            ));
                        } else if !named.iter().any(|(name, _)| name == arg) {
                            named.push((arg.clone(), span));
                        }
                    }
                    fmt.push('{');
                    if let Some(spec) = &hole.spec {
                        fmt.push(':');
                        fmt.push_str(spec);
                    }
                    fmt.push('}');
                    args.push(placeholder_expr(hole, scope, span));
                }
            }
        }
        for (name, span) in named {
            let ident = make_ident(&name, span);
            args.push(quote_spanned!(span=> #ident = #ident));
        }
        match errors {
            Some(errors) => Err(errors),
            None => Ok((fmt, args)),
        }
    }

    /// Whether the name has no placeholders.
    pub fn is_static(&self) -> bool {
        self.pieces.iter().all(|p| matches!(p, Piece::Text(_)))
    }
}

fn placeholder_expr(hole: &Placeholder, scope: &Scope, span: Span) -> TokenStream {
    let mut expr = if hole.root == "self" {
        scope.self_expr(span)
    } else {
        let ident = make_ident(&hole.root, span);
        quote_spanned!(span=> #ident)
    };
    // Fields are left to the compiler (only the root can be checked here). Their tokens sit at
    // the placeholder but belong to the expansion, so rustc does not offer its "a field with a
    // similar name exists" fix: on stable the placeholder's span is the whole literal, which the
    // fix would replace by the field's name. Fields are not hygienic under `mixed_site`: they
    // resolve, privacy included, as written.
    let member_span = span.resolved_at(Span::mixed_site());
    for field in &hole.fields {
        let member: TokenStream = match field.parse::<u32>() {
            Ok(index) => {
                let index = syn::Index {
                    index,
                    span: member_span,
                };
                quote_spanned!(member_span=> #index)
            }
            Err(_) => {
                let ident = make_ident(field, member_span);
                quote_spanned!(member_span=> #ident)
            }
        };
        expr = quote_spanned!(member_span=> #expr.#member);
    }
    expr
}

fn collect_bindings(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(ident) => {
            let name = ident.ident.unraw().to_string();
            if !names.contains(&name) {
                names.push(name);
            }
            if let Some((_, sub)) = &ident.subpat {
                collect_bindings(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Struct(strukt) => strukt.fields.iter().for_each(|f| collect_bindings(&f.pat, names)),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| collect_bindings(p, names)),
        Pat::Reference(reference) => collect_bindings(&reference.pat, names),
        Pat::Paren(paren) => collect_bindings(&paren.pat, names),
        Pat::Type(typed) => collect_bindings(&typed.pat, names),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use proptest::prelude::*;

    fn hole(root: &str, fields: &[&str], spec: Option<&str>, range: Range<usize>) -> Piece {
        Piece::Hole(Placeholder {
            root: root.into(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
            spec: spec.map(Into::into),
            spec_args: Vec::new(),
            range,
        })
    }

    fn template_err(lit: LitStr) -> String {
        Template::parse(lit).unwrap_err().to_string()
    }

    #[test]
    fn splits_text_and_placeholders() {
        assert_eq!(
            parse_pieces("inventory:{sku}").unwrap(),
            vec![Piece::Text("inventory:".into()), hole("sku", &[], None, 10..15)]
        );
        assert_eq!(
            parse_pieces("{self.region}-{order.line.0}:{n:04}").unwrap(),
            vec![
                hole("self", &["region"], None, 0..13),
                Piece::Text("-".into()),
                hole("order", &["line", "0"], None, 14..28),
                Piece::Text(":".into()),
                hole("n", &[], Some("04"), 29..35),
            ]
        );
        assert_eq!(parse_pieces("a{{b}}c").unwrap(), vec![Piece::Text("a{b}c".into())]);
    }

    #[test]
    fn raw_identifiers_name_parameters_and_fields() {
        assert_eq!(
            parse_pieces("{r#type}:{req.r#match}").unwrap(),
            vec![
                hole("type", &[], None, 0..8),
                Piece::Text(":".into()),
                hole("req", &["match"], None, 9..22),
            ]
        );
        let sig: Signature = syn::parse_quote!(async fn f(r#type: u8, req: Req));
        let template = Template::parse(syn::parse_quote!("{r#type}:{type}:{req.r#match}")).unwrap();
        let (fmt, args) = template.format_args(&Scope::of(&sig)).unwrap();
        assert_eq!(fmt, "{}:{}:{}");
        let args: Vec<String> = args.iter().map(ToString::to_string).collect();
        assert_eq!(args, ["r#type", "r#type", "req . r#match"]);
        assert!(parse_pieces("{r#self}").unwrap_err().message.contains("argument name"));
        assert!(parse_pieces("{a.self}")
            .unwrap_err()
            .message
            .contains("not a field name"));
    }

    #[test]
    fn reports_malformed_placeholders_with_their_range() {
        let err = parse_pieces("x:{}").unwrap_err();
        assert!(err.message.contains("empty placeholder"));
        assert_eq!(err.range, 2..4);
        let err = parse_pieces("x:{id").unwrap_err();
        assert!(err.message.contains("unclosed"));
        assert_eq!(err.range, 2..5);
        let err = parse_pieces("x}").unwrap_err();
        assert!(err.message.contains("unmatched"));
        assert_eq!(err.range, 1..2);
        assert!(parse_pieces("{1x}").unwrap_err().message.contains("argument name"));
        assert!(parse_pieces("{a.}").unwrap_err().message.contains("not a field name"));
        assert!(parse_pieces("{a.b-c}")
            .unwrap_err()
            .message
            .contains("not a field name"));
    }

    /// Digits that are no `u32` used to reach `Ident::new`, which panics on a number: the macro
    /// failed with "proc macro panicked". `01` is no tuple index to Rust either.
    #[test]
    fn a_field_is_a_tuple_index_only_as_rust_writes_one() {
        for bad in ["{self.10100000000:100x?}", "{id.4294967296}", "{id.01}", "{id.+1}"] {
            let err = parse_pieces(bad).unwrap_err();
            assert!(err.message.contains("is not a field name"), "{bad}: {}", err.message);
        }
        assert!(parse_pieces("{id.4294967295}").is_ok());
    }

    #[test]
    fn format_specs_are_checked_where_they_are_written() {
        for good in ["08", ">12", "*^+#012.3?", "x", "#X", "e", ".3", "<w$", ".p$", "0", "x?"] {
            assert!(check_spec(good).is_ok(), "{good:?} refused");
        }
        assert_eq!(check_spec(">w$.p$").unwrap(), ["w", "p"]);
        let err = parse_pieces("k:{id:zz}").unwrap_err();
        assert!(err.message.contains("unknown format `zz`"), "{}", err.message);
        assert_eq!(err.range, 6..8);
        assert!(check_spec("1$").unwrap_err().contains("positional width"));
        assert!(check_spec(".*").unwrap_err().contains("`.*`"));
        assert!(check_spec(".").unwrap_err().contains("precision"));
        assert!(check_spec("8d").unwrap_err().contains("unknown format `d`"));

        let sig: Signature = syn::parse_quote!(async fn f(id: u8, w: usize));
        let template = Template::parse(syn::parse_quote!("k:{id:>w$}")).unwrap();
        let (fmt, args) = template.format_args(&Scope::of(&sig)).unwrap();
        assert_eq!(fmt, "k:{:>w$}");
        assert_eq!(args[1].to_string(), "w = w");
        let template = Template::parse(syn::parse_quote!("k:{id:>n$}")).unwrap();
        let err = template.format_args(&Scope::of(&sig)).unwrap_err().to_string();
        assert!(err.contains("`n`, which is not a parameter"), "{err}");
    }

    #[test]
    fn checks_placeholders_against_parameters() {
        let sig: Signature = syn::parse_quote!(async fn f(&self, sku: &str, (a, b): (u8, u8)));
        let scope = Scope::of(&sig);
        assert_eq!(
            scope.names.iter().map(String::as_str).collect::<Vec<_>>(),
            ["self", "sku", "a", "b"]
        );
        let template = Template::parse(syn::parse_quote!("i:{sku}:{a}:{self.zone}")).unwrap();
        let (fmt, args) = template.format_args(&scope).unwrap();
        assert_eq!(fmt, "i:{}:{}:{}");
        assert_eq!(args.len(), 3);
        assert_eq!(args[2].to_string(), "self . zone");

        let template = Template::parse(syn::parse_quote!("i:{skus}")).unwrap();
        let err = template.format_args(&scope).unwrap_err().to_string();
        assert!(err.contains("unknown placeholder `{skus}`"), "{err}");
        assert!(
            err.contains("the parameters of `f` are `self`, `sku`, `a`, `b`"),
            "{err}"
        );

        let mut scope = scope;
        scope.self_alias = Some(Ident::new("__self", Span::call_site()));
        let template = Template::parse(syn::parse_quote!("{self.zone}")).unwrap();
        assert_eq!(template.format_args(&scope).unwrap().1[0].to_string(), "__self . zone");
    }

    #[test]
    fn rejects_names_zookeeper_refuses() {
        assert!(template_err(syn::parse_quote!("")).contains("empty"));
        assert!(template_err(syn::parse_quote!("a/{b}")).contains("`/`"));
        assert!(template_err(syn::parse_quote!(".")).contains("reserves `.` and `..`"));
        assert!(template_err(syn::parse_quote!("..")).contains("reserves `.` and `..`"));
        assert!(Template::parse(syn::parse_quote!("..{b}")).is_ok());
        assert!(Template::parse(syn::parse_quote!("...")).is_ok());
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(template_err(syn::parse_quote!(#long)).contains("201 bytes"));
        let long_fixed = format!("{}{{id}}", "x".repeat(MAX_NAME_LEN + 1));
        assert!(template_err(syn::parse_quote!(#long_fixed)).contains("fixed text"));
        let longest = "é".repeat(MAX_NAME_LEN / 2);
        assert!(Template::parse(syn::parse_quote!(#longest)).is_ok());
        assert!(template_err(syn::parse_quote!("lock:🔒")).contains("Basic Multilingual Plane"));
        assert!(template_err(syn::parse_quote!("{id}\u{10000}")).contains("U+10000"));
        assert!(template_err(syn::parse_quote!("a\tb")).contains("control character"));
        assert!(template_err(syn::parse_quote!("a\u{85}")).contains("control character"));
        assert!(template_err(syn::parse_quote!("a\u{e000}")).contains("private-use"));
        assert!(template_err(syn::parse_quote!("a\u{fffe}")).contains("non-character"));
        assert!(Template::parse(syn::parse_quote!("库存:{id}:ünïcödé:\u{fffd}")).is_err());
        assert!(Template::parse(syn::parse_quote!("库存:{id}:ünïcödé:\u{ffef}")).is_ok());
        let escaped = Template::parse(syn::parse_quote!("a{{b}}")).unwrap();
        assert!(escaped.is_static());
    }

    #[test]
    fn agrees_with_the_runtime_on_every_code_point_class() {
        for (c, refused) in [
            ('a', false),
            ('\u{1f}', true),
            ('\u{20}', false),
            ('\u{7e}', false),
            ('\u{7f}', true),
            ('\u{9f}', true),
            ('\u{a0}', false),
            ('\u{d7ff}', false),
            ('\u{e000}', true),
            ('\u{f8ff}', true),
            ('\u{f900}', false),
            ('\u{ffef}', false),
            ('\u{fff0}', true),
            ('\u{ffff}', true),
            ('\u{10000}', true),
            ('\u{10ffff}', true),
        ] {
            assert_eq!(forbidden_char(c).is_some(), refused, "U+{:04X}", u32::from(c));
        }
    }

    /// An identifier that may name a parameter or field: not `_`, `self`, `Self`, `super` or
    /// `crate`; keywords are fine (written raw in code).
    fn ident() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z_][a-z0-9_]{0,6}",
            "[\\p{XID_Start}][\\p{XID_Continue}]{0,3}",
            Just("type".to_owned())
        ]
        .prop_filter("not a usable identifier", |name| {
            !matches!(name.as_str(), "_" | "self" | "Self" | "super" | "crate")
        })
    }

    /// A well-formed `format!` spec and the parameters it names: `[[fill]align][sign]['#']['0']
    /// [width]['.' precision][type]`.
    fn spec() -> impl Strategy<Value = (String, Vec<String>)> {
        let count = || {
            prop_oneof![
                (0..1000u32).prop_map(|n| (n.to_string(), None)),
                "[a-z][a-z0-9_]{0,4}".prop_map(|w| (format!("{w}$"), Some(w)))
            ]
        };
        let align = prop::option::of(("[a-z*_ .:#0-9-]?", prop::sample::select(vec!['<', '^', '>'])));
        let kind = prop::sample::select(vec!["", "?", "x?", "X?", "o", "x", "X", "p", "b", "e", "E"]);
        (
            align,
            "[+-]?",
            "#?",
            "0?",
            prop::option::of(count()),
            prop::option::of(count()),
            kind,
        )
            .prop_map(|(align, sign, alternate, zero, width, precision, kind)| {
                let mut spec = align.map(|(fill, align)| format!("{fill}{align}")).unwrap_or_default();
                spec.push_str(&format!("{sign}{alternate}{zero}"));
                let mut args = Vec::new();
                if let Some((text, arg)) = width {
                    spec.push_str(&text);
                    args.extend(arg);
                }
                if let Some((text, arg)) = precision {
                    spec.push('.');
                    spec.push_str(&text);
                    args.extend(arg);
                }
                spec.push_str(kind);
                (spec, args)
            })
    }

    /// A well-formed template and the pieces it must parse into.
    fn template() -> impl Strategy<Value = (String, Vec<Piece>)> {
        let field = prop_oneof![ident(), any::<u32>().prop_map(|i| i.to_string())];
        let hole = (
            prop_oneof![Just("self".to_owned()), ident()],
            any::<bool>(),
            prop::collection::vec((field, any::<bool>()), 0..3),
            prop::option::of(spec()),
            " ?",
        );
        let piece = prop_oneof!["([a-z0-9:._ -]|\\{\\{|\\}\\}){1,6}".prop_map(Err), hole.prop_map(Ok),];
        prop::collection::vec(piece, 1..6).prop_map(|pieces| {
            let mut value = String::new();
            let mut expected = Vec::new();
            for piece in pieces {
                let (root, raw_root, fields, spec, space) = match piece {
                    Err(text) => {
                        let unescaped = text.replace("{{", "{").replace("}}", "}");
                        match expected.last_mut() {
                            Some(Piece::Text(before)) => before.push_str(&unescaped),
                            _ => expected.push(Piece::Text(unescaped)),
                        }
                        value.push_str(&text);
                        continue;
                    }
                    Ok(hole) => hole,
                };
                let raw = |name: &str, raw: bool| {
                    if raw && name != "self" && !name.bytes().all(|b| b.is_ascii_digit()) {
                        format!("r#{name}")
                    } else {
                        name.to_owned()
                    }
                };
                let start = value.len();
                value.push_str(&format!("{{{space}{}", raw(&root, raw_root)));
                for (field, raw_field) in &fields {
                    value.push_str(&format!(".{}", raw(field, *raw_field)));
                }
                value.push_str(&space);
                if let Some((spec, _)) = &spec {
                    value.push_str(&format!(":{spec}"));
                }
                value.push('}');
                expected.push(Piece::Hole(Placeholder {
                    root,
                    fields: fields.into_iter().map(|(f, _)| f).collect(),
                    spec_args: spec.as_ref().map(|(_, args)| args.clone()).unwrap_or_default(),
                    spec: spec.map(|(spec, _)| spec),
                    range: start..value.len(),
                }));
            }
            (value, expected)
        })
    }

    /// Text close to a template: braces, dots, colons, digits and spec characters.
    fn near_template() -> impl Strategy<Value = String> {
        "([a-z]{1,3}|\\{|\\}|[.:0-9$#<>^+*? ]|r#|/|\\u{0}|é|\\u{10000}){0,16}"
    }

    /// A well-formed template with a snippet inserted somewhere: numbers in fields, stray
    /// braces and spec characters where they are least expected.
    fn mutated_template() -> impl Strategy<Value = String> {
        let snippet = prop_oneof!["[0-9]{1,12}", "[{}.:$#*]", "r#", "[a-z]{1,3}"];
        (template(), snippet, any::<prop::sample::Index>()).prop_map(|((mut value, _), snippet, at)| {
            let boundaries: Vec<usize> = (0..=value.len()).filter(|&i| value.is_char_boundary(i)).collect();
            value.insert_str(*at.get(&boundaries), &snippet);
            value
        })
    }

    /// The parameters a template names, as a function would have them.
    fn scope_for(pieces: &[Piece]) -> Scope {
        let mut names = BTreeSet::new();
        for piece in pieces {
            if let Piece::Hole(hole) = piece {
                names.insert(hole.root.clone());
                names.extend(hole.spec_args.iter().cloned());
            }
        }
        Scope {
            fn_name: "f".into(),
            names: names.into_iter().collect(),
            self_alias: None,
        }
    }

    proptest! {
        #[test]
        fn well_formed_templates_parse_into_their_pieces((value, expected) in template()) {
            prop_assert_eq!(parse_pieces(&value), Ok(expected));
        }

        #[test]
        fn well_formed_specs_are_accepted((spec, args) in spec()) {
            prop_assert_eq!(check_spec(&spec), Ok(args));
        }

        /// Any text: pieces that give the text back, or an error with a message and the range
        /// of the culprit. A template that parses yields code that parses, for a function with
        /// every parameter it names (a panic here would be a "proc macro panicked").
        #[test]
        fn any_text_parses_or_points_at_the_culprit(value in prop_oneof![any::<String>(), near_template(), mutated_template()]) {
            match parse_pieces(&value) {
                Ok(pieces) => {
                    let mut again = String::new();
                    for piece in &pieces {
                        match piece {
                            Piece::Text(text) => again.push_str(&text.replace('{', "{{").replace('}', "}}")),
                            Piece::Hole(hole) => again.push_str(&value[hole.range.clone()]),
                        }
                    }
                    prop_assert_eq!(&again, &value);
                }
                Err(err) => {
                    prop_assert!(!err.message.is_empty());
                    let range = err.range.clone();
                    prop_assert!(range.start < range.end && range.end <= value.len(), "{:?} in {:?}", range, value);
                    prop_assert!(value.is_char_boundary(range.start) && value.is_char_boundary(range.end));
                }
            }
            let Ok(template) = Template::parse(LitStr::new(&value, Span::call_site())) else {
                return Ok(());
            };
            let holes: Vec<&Placeholder> = template.pieces.iter().filter_map(|p| match p {
                Piece::Hole(hole) => Some(hole),
                Piece::Text(_) => None,
            }).collect();
            let named: BTreeSet<&String> = holes.iter().flat_map(|hole| &hole.spec_args).collect();
            let (_, args) = template.format_args(&scope_for(&template.pieces)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(args.len(), holes.len() + named.len());
            for arg in args {
                prop_assert!(syn::parse2::<syn::Expr>(arg.clone()).is_ok(), "{}", arg);
            }
        }

        #[test]
        fn any_spec_is_accepted_or_explained(spec in prop_oneof![any::<String>(), "[0-9a-z$.*#<>^+?-]{0,8}"]) {
            match check_spec(&spec) {
                Ok(args) => {
                    for arg in args {
                        prop_assert!(ident_name(&arg).is_some() && spec.contains(&format!("{arg}$")), "{:?} in {:?}", arg, spec);
                    }
                }
                Err(why) => prop_assert!(!why.is_empty()),
            }
        }

        /// Without placeholders, the macro accepts at compile time exactly the names the runtime
        /// accepts.
        #[test]
        fn fixed_names_are_judged_as_the_runtime_does(name in prop_oneof![
            any::<String>(),
            "[a-z./\\u{7f}\\u{e000}\\u{fff0}\\u{10000}]{0,3}",
            "[a-zé]{195,205}",
        ]) {
            let name = name.replace(['{', '}'], "");
            let macro_ok = Template::parse(LitStr::new(&name, Span::call_site())).is_ok();
            prop_assert_eq!(macro_ok, zklock::validate_name(&name).is_ok());
        }
    }
}
