//! The lock-name template: `"inventory:{sku}"`, `"order:{order.id}"`, `"cache:{self.region}"`.
//!
//! A placeholder names a function argument (or `self`), optionally followed by fields, and
//! optionally a format spec after `:` as in `format!`. `{{` and `}}` stand for braces.
//! Placeholders are checked against the function's parameters at compile time; errors point
//! into the literal where the compiler allows it (otherwise at the literal, naming the
//! placeholder).

use std::collections::BTreeSet;
use std::ops::Range;

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote_spanned};
use syn::{FnArg, LitStr, Pat, Signature};

/// One `{…}` in the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placeholder {
    /// `sku`, `self`, …
    pub root: String,
    /// `id` in `{order.id}`; may be tuple indices such as `0`.
    pub fields: Vec<String>,
    /// The format spec after `:`, without the colon.
    pub spec: Option<String>,
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
                let inner = &value[i + 1..i + len];
                let hole = parse_placeholder(inner, range.clone())?;
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
        Some((path, spec)) => (path.trim(), Some(spec.to_owned())),
        None => (inner.trim(), None),
    };
    if path.is_empty() {
        return Err(fail(
            "empty placeholder `{}` in lock name; name a function argument, as in `{id}`".into(),
        ));
    }
    let mut parts = path.split('.');
    let root = parts.next().unwrap_or_default().to_owned();
    if !is_ident(&root) {
        return Err(fail(format!(
            "placeholder `{{{inner}}}` in lock name must start with an argument name, as in `{{id}}` or `{{order.id}}`"
        )));
    }
    let mut fields = Vec::new();
    for field in parts {
        if !is_ident(field) && !field.chars().all(|c| c.is_ascii_digit()) || field.is_empty() {
            return Err(fail(format!(
                "`{field}` in placeholder `{{{inner}}}` is not a field name"
            )));
        }
        fields.push(field.to_owned());
    }
    Ok(Placeholder {
        root,
        fields,
        spec,
        range,
    })
}

fn is_ident(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_alphabetic())
        && chars.all(|c| c == '_' || c.is_alphanumeric())
        && s != "_"
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

impl Template {
    /// Parses and checks a template literal on its own (not yet against the parameters).
    pub fn parse(lit: LitStr) -> syn::Result<Template> {
        let value = lit.value();
        if value.is_empty() {
            return Err(syn::Error::new(lit.span(), "the lock name is empty"));
        }
        let pieces = parse_pieces(&value).map_err(|e| syn::Error::new(subspan(&lit, e.range), e.message))?;
        for piece in &pieces {
            if let Piece::Text(text) = piece {
                if text.contains('/') {
                    return Err(syn::Error::new(
                        lit.span(),
                        "a lock name is a single ZooKeeper path segment and cannot contain `/`; \
                         use another separator such as `:`",
                    ));
                }
                if text.chars().any(char::is_control) {
                    return Err(syn::Error::new(
                        lit.span(),
                        "a lock name cannot contain control characters",
                    ));
                }
            }
        }
        Ok(Template { lit, pieces })
    }

    /// Checks every placeholder against the function's parameters and builds the
    /// `format!` string and its arguments.
    pub fn format_args(&self, sig: &Signature) -> syn::Result<(String, Vec<TokenStream>)> {
        let params = parameter_names(sig);
        let mut fmt = String::new();
        let mut args = Vec::new();
        let mut errors: Option<syn::Error> = None;
        for piece in &self.pieces {
            match piece {
                Piece::Text(text) => fmt.push_str(&text.replace('{', "{{").replace('}', "}}")),
                Piece::Hole(hole) => {
                    let span = subspan(&self.lit, hole.range.clone());
                    if !params.contains(&hole.root) {
                        let err = syn::Error::new(span, unknown_message(hole, &params, sig));
                        match &mut errors {
                            Some(errors) => errors.combine(err),
                            None => errors = Some(err),
                        }
                        continue;
                    }
                    fmt.push('{');
                    if let Some(spec) = &hole.spec {
                        fmt.push(':');
                        fmt.push_str(spec);
                    }
                    fmt.push('}');
                    args.push(placeholder_expr(hole, span));
                }
            }
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

fn unknown_message(hole: &Placeholder, params: &BTreeSet<String>, sig: &Signature) -> String {
    let name = &sig.ident;
    if hole.root == "self" {
        return format!("placeholder `{{self…}}` in lock name, but `{name}` has no `self` parameter");
    }
    let known: Vec<String> = params.iter().map(|p| format!("`{p}`")).collect();
    let known = if known.is_empty() {
        format!("`{name}` has no parameters")
    } else {
        format!("the parameters of `{name}` are {}", known.join(", "))
    };
    format!(
        "unknown placeholder `{{{}}}` in lock name: `{}` is not a parameter ({known})",
        hole.root, hole.root
    )
}

fn placeholder_expr(hole: &Placeholder, span: Span) -> TokenStream {
    let mut expr = if hole.root == "self" {
        quote_spanned!(span=> self)
    } else {
        let ident = format_ident!("{}", hole.root, span = span);
        quote_spanned!(span=> #ident)
    };
    for field in &hole.fields {
        let member: TokenStream = match field.parse::<u32>() {
            Ok(index) => {
                let index = syn::Index { index, span };
                quote_spanned!(span=> #index)
            }
            Err(_) => {
                let ident = format_ident!("{}", field, span = span);
                quote_spanned!(span=> #ident)
            }
        };
        expr = quote_spanned!(span=> #expr.#member);
    }
    expr
}

/// The names a template may refer to: `self` for a receiver, and every binding of the
/// parameters' patterns.
pub fn parameter_names(sig: &Signature) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(_) => {
                names.insert("self".to_owned());
            }
            FnArg::Typed(typed) => collect_bindings(&typed.pat, &mut names),
        }
    }
    names
}

fn collect_bindings(pat: &Pat, names: &mut BTreeSet<String>) {
    match pat {
        Pat::Ident(ident) => {
            names.insert(ident.ident.to_string());
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
    use super::*;

    fn hole(root: &str, fields: &[&str], spec: Option<&str>, range: Range<usize>) -> Piece {
        Piece::Hole(Placeholder {
            root: root.into(),
            fields: fields.iter().map(|f| f.to_string()).collect(),
            spec: spec.map(Into::into),
            range,
        })
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

    #[test]
    fn checks_placeholders_against_parameters() {
        let sig: Signature = syn::parse_quote!(async fn f(&self, sku: &str, (a, b): (u8, u8)));
        assert_eq!(
            parameter_names(&sig).into_iter().collect::<Vec<_>>(),
            ["a", "b", "self", "sku"]
        );
        let template = Template::parse(syn::parse_quote!("i:{sku}:{a}:{self.zone}")).unwrap();
        let (fmt, args) = template.format_args(&sig).unwrap();
        assert_eq!(fmt, "i:{}:{}:{}");
        assert_eq!(args.len(), 3);
        assert_eq!(args[2].to_string(), "self . zone");

        let template = Template::parse(syn::parse_quote!("i:{skus}")).unwrap();
        let err = template.format_args(&sig).unwrap_err().to_string();
        assert!(err.contains("unknown placeholder `{skus}`"), "{err}");
        assert!(err.contains("`sku`"), "{err}");
    }

    #[test]
    fn rejects_empty_names_and_slashes() {
        assert!(Template::parse(syn::parse_quote!(""))
            .unwrap_err()
            .to_string()
            .contains("empty"));
        assert!(Template::parse(syn::parse_quote!("a/{b}"))
            .unwrap_err()
            .to_string()
            .contains("`/`"));
        let escaped = Template::parse(syn::parse_quote!("a{{b}}")).unwrap();
        assert!(escaped.is_static());
    }
}
