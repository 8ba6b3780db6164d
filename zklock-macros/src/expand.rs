//! Code generation: the function keeps its signature; its body becomes one call of
//! `zklock::__private::run_locked`, which holds all the lock logic.
//!
//! Two shapes of function are accepted:
//!
//! * an `async fn`: its body becomes the future `run_locked` runs under the lock;
//! * a function whose body ends in `Box::pin(async move { … })` (or `async move { … }`) and
//!   whose return type names `Future<Output = …>`: what `#[async_trait]` makes of an
//!   `async fn`, as it expands before the attributes of the methods inside it. The lock is
//!   taken inside that future, around the part that holds the original body.

use proc_macro2::{Delimiter, Group, Span, TokenStream};
use proc_macro_crate::FoundCrate;
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    Attribute, Block, Expr, ExprAsync, ExprPath, GenericArgument, Ident, Pat, Path, PathArguments, ReturnType,
    Signature, Stmt, Type, TypeParamBound, Visibility,
};

use crate::args::{IfBusyArg, LockArgs, ModeArg, OnLostArg, OnRevokeArg, TimeoutArg};
use crate::template::Scope;

/// A function whose body is kept as raw tokens, so a syntax error inside the body is reported
/// by the compiler on the user's code rather than as a failure of the attribute.
pub struct MaybeItemFn {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    /// `#![…]` at the top of the body: they apply to the whole function, so they stay at the
    /// top of the generated body.
    pub inner_attrs: Vec<Attribute>,
    /// The body `{ … }` without its inner attributes.
    pub body: Group,
}

impl Parse for MaybeItemFn {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        if input.peek(syn::Token![;]) {
            return Err(syn::Error::new(
                input.span(),
                "#[distributed_lock] needs a function with a body; put it on the implementation, not on the trait's declaration",
            ));
        }
        let body: Group = input.parse()?;
        if body.delimiter() != Delimiter::Brace {
            return Err(syn::Error::new(body.span(), "expected the function body `{ … }`"));
        }
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the function body"));
        }
        let split = |input: ParseStream<'_>| -> syn::Result<(Vec<Attribute>, TokenStream)> {
            Ok((input.call(Attribute::parse_inner)?, input.parse()?))
        };
        // A malformed inner attribute is left in place, for the compiler to report.
        let (inner_attrs, rest) = split
            .parse2(body.stream())
            .unwrap_or_else(|_| (Vec::new(), body.stream()));
        let mut rest = Group::new(Delimiter::Brace, rest);
        rest.set_span(body.span());
        Ok(MaybeItemFn {
            attrs,
            vis,
            sig,
            inner_attrs,
            body: rest,
        })
    }
}

/// Expands the function, or explains what is wrong with it.
pub fn expand(args: LockArgs, item: MaybeItemFn) -> syn::Result<TokenStream> {
    let MaybeItemFn {
        attrs,
        vis,
        sig,
        inner_attrs,
        body,
    } = item;
    let import_crate = crate_path(args.krate.as_ref())?;
    let new_body = if sig.asyncness.is_some() {
        let ret = declared_return(&sig)?;
        let scope = Scope::of(&sig);
        lock_call(&args, &import_crate, &scope, &sig, ret, body.to_token_stream())?
    } else if let Some(future) = FutureBody::find(&sig, &body) {
        future.expand(&args, &import_crate, &sig)?
    } else {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "#[distributed_lock] needs an `async fn`: the lock is taken with `.await`",
        ));
    };
    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #new_body
        }
    })
}

/// The path of the `zklock` crate in the expansion: `crate = …` if given, else the name the
/// crate has in the user's `Cargo.toml` (renamed dependencies included), else `::zklock`; an
/// error if that `Cargo.toml` was read and does not list zklock.
///
/// The expansion imports it once, as `__zklock`, and uses that name: a wrong `crate = …` is one
/// error, at the path.
fn crate_path(explicit: Option<&Path>) -> syn::Result<TokenStream> {
    if let Some(path) = explicit {
        return Ok(quote_spanned!(path.span()=> use #path as __zklock;));
    }
    import_found(proc_macro_crate::crate_name("zklock"))
}

/// What the attribute tells a crate whose `Cargo.toml` does not list zklock. rustc alone would
/// say "unresolved import `zklock`" at the attribute, which does not lead to `crate = …`.
const NOT_A_DEPENDENCY: &str = "zklock is not a dependency of this crate; if you reach zklock through a \
     re-export, name it with `crate = \"path::to::zklock\"`, otherwise add zklock to [dependencies]";

/// The import for what the search of the user's `Cargo.toml` found.
fn import_found(found: Result<FoundCrate, proc_macro_crate::Error>) -> syn::Result<TokenStream> {
    let path = match found {
        Ok(FoundCrate::Name(name)) if is_crate_ident(&name) => {
            let ident = Ident::new(&name, Span::call_site());
            quote!(::#ident)
        }
        // The manifest was read and zklock is in none of its dependency tables, so `::zklock`
        // cannot resolve under Cargo: the crate is reached through a re-export, if at all.
        Err(proc_macro_crate::Error::CrateNotFound { .. }) => {
            return Err(syn::Error::new(Span::call_site(), NOT_A_DEPENDENCY))
        }
        // `Itself` is the zklock package's own tests and examples, which name it `zklock`. With
        // no manifest to read (a build without Cargo), `--extern zklock` is the likely setup.
        _ => quote!(::zklock),
    };
    Ok(quote!(use #path as __zklock;))
}

/// The name the expansion imports the crate as, with the span of the code that uses it.
fn krate_at(span: Span) -> Ident {
    Ident::new("__zklock", span)
}

fn is_crate_ident(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// The return type of an `async fn`, which must be a `Result` (or an alias of one).
fn declared_return(sig: &Signature) -> syn::Result<&Type> {
    match &sig.output {
        ReturnType::Type(_, ty) => check_return(sig, ty),
        ReturnType::Default => Err(returns_unit(sig)),
    }
}

fn check_return<'a>(sig: &Signature, ret: &'a Type) -> syn::Result<&'a Type> {
    match ret {
        Type::Path(_) => Ok(ret),
        Type::Tuple(tuple) if tuple.elems.is_empty() => Err(returns_unit(sig)),
        _ => Err(syn::Error::new_spanned(
            ret,
            "a #[distributed_lock] function must return `Result<T, E>` with `E: From<zklock::LockError>`, \
             so lock errors (timeout, loss, connection) can be returned",
        )),
    }
}

fn returns_unit(sig: &Signature) -> syn::Error {
    syn::Error::new(
        sig.paren_token.span.close(),
        format!(
            "a #[distributed_lock] function must return `Result<T, E>` with `E: From<zklock::LockError>`, \
             so lock errors (timeout, loss, connection) can be returned; `{}` returns `()`",
            sig.ident
        ),
    )
}

/// The statements that take the lock, run `body` (a block) under it and yield the function's
/// result: `let name = …; let client = …; run_locked(…).await`.
fn lock_call(
    args: &LockArgs,
    import_crate: &TokenStream,
    scope: &Scope,
    sig: &Signature,
    ret: &Type,
    body: TokenStream,
) -> syn::Result<TokenStream> {
    if let Some(token) = &args.token {
        let name = token.unraw().to_string();
        if scope.contains(&name) {
            return Err(syn::Error::new(
                token.span(),
                format!(
                    "`token = {token}` would hide the parameter `{token}` of `{}` in the body; \
                     name the fencing token's binding something else, as in `token = fence`",
                    sig.ident
                ),
            ));
        }
    }

    // Local names of the expansion are hygienic: the body cannot see or clash with them.
    let site = Span::mixed_site();
    let import = import_crate;
    let krate = krate_at(Span::call_site());
    let names_var = format_ident!("__zklock_names", span = site);
    let client_var = format_ident!("__zklock_client", span = site);
    let ret_var = format_ident!("__zklock_ret", span = site);

    let names = args
        .names
        .iter()
        .map(|name| {
            let (fmt, fmt_args) = name.format_args(scope)?;
            Ok(if name.is_static() {
                let text = fmt.replace("{{", "{").replace("}}", "}");
                quote!(::std::string::String::from(#text))
            } else {
                // The format string carries the literal's span, so anything the compiler reports
                // about it points at the name, not at the attribute.
                let fmt = syn::LitStr::new(&fmt, name.lit.span());
                quote!(::std::format!(#fmt #(, #fmt_args)*))
            })
        })
        .collect::<syn::Result<Vec<_>>>()?;
    let client = match &args.client {
        Some(expr) => {
            let mut expr = expr.clone();
            if let Some(alias) = &scope.self_alias {
                RenameSelf(alias).visit_expr_mut(&mut expr);
            }
            let krate = krate_at(expr.span());
            quote_spanned!(expr.span()=> #krate::__private::explicit_client(&(#expr)))
        }
        None => quote!(::core::option::Option::None),
    };
    let kind = match args.mode {
        ModeArg::Mutex => quote!(#krate::LockKind::Mutex),
        ModeArg::Read => quote!(#krate::LockKind::Read),
        ModeArg::Write => quote!(#krate::LockKind::Write),
        ModeArg::Semaphore(leases) => quote!(#krate::LockKind::Semaphore { leases: #leases }),
    };
    let timeout = match args.timeout {
        // Skipping when busy is ShedLock's try-once: one attempt unless a timeout is given.
        TimeoutArg::Default if args.if_busy == IfBusyArg::Skip => {
            quote!(#krate::__private::Timeout::After(::core::time::Duration::ZERO))
        }
        TimeoutArg::Default => quote!(#krate::__private::Timeout::Default),
        TimeoutArg::Forever => quote!(#krate::__private::Timeout::Forever),
        TimeoutArg::After(d) => {
            let duration = duration_expr(d);
            quote!(#krate::__private::Timeout::After(#duration))
        }
    };
    let on_lost = match args.on_lost {
        OnLostArg::Abort => quote!(#krate::__private::OnLost::Abort),
        OnLostArg::Continue => quote!(#krate::__private::OnLost::Continue),
    };
    let on_revoke = match args.on_revoke {
        OnRevokeArg::Continue => quote!(#krate::__private::OnRevoke::Continue),
        OnRevokeArg::Abort => quote!(#krate::__private::OnRevoke::Abort),
    };
    let max_hold = optional_duration(args.max_hold);
    let lock_delay = optional_duration(args.lock_delay);
    let min_hold = optional_duration(args.min_hold);
    let cache = optional_duration(args.cache);
    let templates = args.names.iter().map(|name| name.lit.value());
    let ret_infer = infer_impl_trait(ret);
    let converter = converter(ret, &ret_infer, args.if_busy);
    let token = match &args.token {
        Some(ident) => quote!(#ident),
        None => quote!(_),
    };
    // Fixes the type the body's `return`s must have before the body is type-checked, so a
    // wrong `return` is reported at the user's token (as it would be without the attribute),
    // not inferred as the future's output. The branch never runs and is not unreachable code.
    let return_edge = quote_spanned! {ret.span()=>
        if let ::core::option::Option::Some(#ret_var) = ::core::option::Option::None::<#ret_infer> {
            return #ret_var;
        }
    };

    let future_body = opened_with(body, return_edge);

    Ok(quote! {
        #import
        let #names_var = ::std::vec![#(#names),*];
        let #client_var = #client;
        #krate::__private::run_locked(
            #client_var,
            #names_var,
            #krate::__private::LockOptions {
                kind: #kind,
                timeout: #timeout,
                on_lost: #on_lost,
                on_revoke: #on_revoke,
                max_hold: #max_hold,
                lock_delay: #lock_delay,
                min_hold: #min_hold,
                cache: #cache,
                templates: &[#(#templates),*],
            },
            #converter,
            move |#token: #krate::FencingToken| async move #future_body,
        )
        .await
    })
}

/// The body block with `first` put at its top, to be the block of the `async move` that runs
/// it: the user's braces become the async block's own, so no lint sees a block wrapped in a
/// block (`{ Ok(()) }` as a body would otherwise draw "unnecessary braces" on the user's code).
/// A body that is not one brace group is wrapped in a block of its own.
fn opened_with(body: TokenStream, first: TokenStream) -> TokenStream {
    let mut trees = body.clone().into_iter();
    if let (Some(proc_macro2::TokenTree::Group(block)), None) = (trees.next(), trees.next()) {
        if block.delimiter() == Delimiter::Brace {
            let mut inside = first;
            inside.extend(block.stream());
            let mut opened = Group::new(Delimiter::Brace, inside);
            opened.set_span(block.span());
            return opened.into_token_stream();
        }
    }
    quote!({ #first #body })
}

/// Replaces the expression `self` by another binding (`__self` in an `#[async_trait]`
/// method's future, where `self` may already have been moved).
struct RenameSelf<'a>(&'a Ident);

impl VisitMut for RenameSelf<'_> {
    fn visit_expr_path_mut(&mut self, expr: &mut ExprPath) {
        if expr.qself.is_none() && expr.path.is_ident("self") {
            let span = expr.path.segments[0].ident.span();
            expr.path.segments[0].ident = Ident::new(&self.0.to_string(), span);
        }
    }
}

/// The call that yields the `LockError` conversion for the return type. For a type written
/// `Result<T, E>`, only `E` is checked, so a missing `From<LockError>` is reported on `E`.
/// With `if_busy = "skip"` the conversion turns a timeout into `Ok(T::default())`, and `T` is
/// checked for `Default` (reported on the return type).
fn converter(ret: &Type, ret_infer: &Type, if_busy: IfBusyArg) -> TokenStream {
    if if_busy == IfBusyArg::Skip {
        let krate = krate_at(ret.span());
        return quote_spanned!(ret.span()=> #krate::__private::skipping_converter::<#ret_infer>());
    }
    if let Type::Path(path) = ret {
        if let Some(last) = path.path.segments.last() {
            if last.ident == "Result" {
                if let PathArguments::AngleBracketed(generics) = &last.arguments {
                    let types: Vec<&Type> = generics
                        .args
                        .iter()
                        .filter_map(|arg| match arg {
                            GenericArgument::Type(ty) => Some(ty),
                            _ => None,
                        })
                        .collect();
                    if let [_, err] = types.as_slice() {
                        let err = infer_impl_trait(err);
                        let krate = krate_at(err.span());
                        return quote_spanned!(err.span()=> #krate::__private::result_converter::<_, #err>());
                    }
                }
            }
        }
    }
    let krate = krate_at(ret.span());
    quote_spanned!(ret.span()=> #krate::__private::converter::<#ret_infer>())
}

/// The type with every `impl Trait` replaced by `_`, for positions where `impl Trait` is not
/// allowed (a turbofish).
fn infer_impl_trait(ty: &Type) -> Type {
    struct Infer;
    impl VisitMut for Infer {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(it) = ty {
                *ty = Type::Infer(syn::TypeInfer {
                    underscore_token: syn::Token![_](it.impl_token.span),
                });
                return;
            }
            syn::visit_mut::visit_type_mut(self, ty);
        }
    }
    let mut ty = ty.clone();
    Infer.visit_type_mut(&mut ty);
    ty
}

/// A non-`async` function that returns a future built in its body: `Box::pin(async move { … })`
/// or `async move { … }` as the body's last expression, with a return type that names
/// `Future<Output = …>`. This is how `#[async_trait]` (which expands first) leaves an
/// `async fn`.
struct FutureBody {
    /// The statements before the future.
    before: Vec<Stmt>,
    /// `Box::pin`, when the future is pinned.
    pin: Option<Expr>,
    future: ExprAsync,
    output: Type,
}

impl FutureBody {
    fn find(sig: &Signature, body: &Group) -> Option<FutureBody> {
        let output = match &sig.output {
            ReturnType::Type(_, ty) => future_output(ty)?.clone(),
            ReturnType::Default => return None,
        };
        let mut stmts = Block::parse_within.parse2(body.stream()).ok()?;
        let Some(Stmt::Expr(last, None)) = stmts.pop() else {
            return None;
        };
        let (pin, future) = match last {
            Expr::Async(future) => (None, future),
            Expr::Call(mut call) if call.args.len() == 1 && is_box_pin(&call.func) => {
                match call.args.pop()?.into_value() {
                    Expr::Async(future) => (Some(*call.func), future),
                    _ => return None,
                }
            }
            _ => return None,
        };
        future.capture?;
        Some(FutureBody {
            before: stmts,
            pin,
            future,
            output,
        })
    }

    /// The body with the lock taken inside the future.
    ///
    /// `#[async_trait]` writes the future as `{ <return edge>; let __self = self; let x = x; …;
    /// let __ret: R = { <body> }; __ret }` (the `let` bindings move the arguments in; `self` in
    /// the body becomes `__self`). The lock goes around `{ <body> }`, after the bindings, so
    /// placeholders and `client = …` see the arguments as the body does. In any other shape
    /// (another attribute rewrote the future first) it goes around the future's whole content.
    fn expand(self, args: &LockArgs, import_crate: &TokenStream, sig: &Signature) -> syn::Result<TokenStream> {
        let FutureBody {
            before,
            pin,
            future,
            output,
        } = self;
        let ret = check_return(sig, &output)?;
        let mut scope = Scope::of(sig);
        let ExprAsync {
            attrs,
            async_token,
            capture,
            block,
        } = future;
        let brace = block.brace_token;
        let mut stmts = block.stmts;
        let held = stmts.iter().position(|stmt| match stmt {
            Stmt::Local(local) => {
                matches!(&local.pat, Pat::Type(typed) if matches!(&*typed.pat, Pat::Ident(id) if id.ident == "__ret"))
                    && matches!(&local.init, Some(init) if init.diverge.is_none() && matches!(*init.expr, Expr::Block(_)))
            }
            _ => false,
        });
        let held = held.or_else(|| match stmts.last() {
            Some(Stmt::Expr(Expr::Block(_), None)) => Some(stmts.len() - 1),
            _ => None,
        });

        let content = match held {
            Some(index) => {
                // Arguments bound before the body: `let x = x;`, `let (a, b) = { let __arg1 = … };`.
                for stmt in &stmts[..index] {
                    if let Stmt::Local(local) = stmt {
                        scope.add(&local.pat);
                        if matches!(&local.pat, Pat::Ident(id) if id.ident == "__self") {
                            if let Pat::Ident(id) = &local.pat {
                                scope.self_alias = Some(id.ident.clone());
                            }
                        }
                    }
                }
                forget_generated_names(&mut scope, sig);
                let held_stmt = &mut stmts[index];
                let body = match held_stmt {
                    Stmt::Local(local) => &mut *local.init.as_mut().expect("checked above").expr,
                    Stmt::Expr(expr, _) => expr,
                    _ => unreachable!("checked above"),
                };
                let call = lock_call(args, import_crate, &scope, sig, ret, body.to_token_stream())?;
                *body = Expr::Verbatim(quote!({ #call }));
                quote!(#(#stmts)*)
            }
            None => {
                forget_generated_names(&mut scope, sig);
                lock_call(args, import_crate, &scope, sig, ret, quote!({ #(#stmts)* }))?
            }
        };
        let mut future = quote!(#(#attrs)* #async_token #capture);
        brace.surround(&mut future, |tokens| content.to_tokens(tokens));
        let future = match pin {
            Some(pin) => quote!(#pin(#future)),
            None => future,
        };
        Ok(quote!(#(#before)* #future))
    }
}

/// Drops the parameters `#[async_trait]` named for patterns (`__arg1`), which no user wrote.
fn forget_generated_names(scope: &mut Scope, sig: &Signature) {
    for input in &sig.inputs {
        if let syn::FnArg::Typed(typed) = input {
            if let Pat::Ident(id) = &*typed.pat {
                let name = id.ident.to_string();
                if name
                    .strip_prefix("__arg")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                {
                    scope.remove(&name);
                }
            }
        }
    }
    scope.remove("__self");
}

/// `Box::pin`, however it is spelled (`Box::pin`, `::std::boxed::Box::pin`, …).
fn is_box_pin(func: &Expr) -> bool {
    let Expr::Path(path) = func else {
        return false;
    };
    let segments: Vec<String> = path.path.segments.iter().map(|s| s.ident.to_string()).collect();
    segments.ends_with(&["Box".to_owned(), "pin".to_owned()])
}

/// `R` in a return type such as `Pin<Box<dyn Future<Output = R> + Send + 'a>>` or
/// `impl Future<Output = R>`.
fn future_output(ty: &Type) -> Option<&Type> {
    fn in_path(path: &Path) -> Option<&Type> {
        let last = path.segments.last()?;
        let PathArguments::AngleBracketed(generics) = &last.arguments else {
            return None;
        };
        generics.args.iter().find_map(|arg| match arg {
            GenericArgument::AssocType(assoc) if assoc.ident == "Output" && last.ident == "Future" => Some(&assoc.ty),
            GenericArgument::Type(inner) => future_output(inner),
            _ => None,
        })
    }
    fn in_bounds<'a>(bounds: impl IntoIterator<Item = &'a TypeParamBound>) -> Option<&'a Type> {
        bounds.into_iter().find_map(|bound| match bound {
            TypeParamBound::Trait(tr) => in_path(&tr.path),
            _ => None,
        })
    }
    match ty {
        Type::Path(path) => in_path(&path.path),
        Type::TraitObject(object) => in_bounds(&object.bounds),
        Type::ImplTrait(imp) => in_bounds(&imp.bounds),
        Type::Paren(paren) => future_output(&paren.elem),
        Type::Group(group) => future_output(&group.elem),
        _ => None,
    }
}

/// `duration` as an expression of the expansion, to the nanosecond.
fn duration_expr(duration: std::time::Duration) -> TokenStream {
    let (secs, nanos) = (duration.as_secs(), duration.subsec_nanos());
    quote!(::core::time::Duration::new(#secs, #nanos))
}

/// `Option<Duration>` as an expression of the expansion.
fn optional_duration(duration: Option<std::time::Duration>) -> TokenStream {
    match duration {
        None => quote!(::core::option::Option::None),
        Some(d) => {
            let duration = duration_expr(d);
            quote!(::core::option::Option::Some(#duration))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, item: TokenStream) -> Result<String, String> {
        let args: LockArgs = syn::parse2(args).map_err(|e| e.to_string())?;
        let item: MaybeItemFn = syn::parse2(item).map_err(|e| e.to_string())?;
        expand(args, item).map(|t| t.to_string()).map_err(|e| e.to_string())
    }

    /// The expansion the crate documentation shows is the attribute's output for its first
    /// example, token for token (comments and layout aside).
    #[test]
    fn the_documented_expansion_is_the_real_one() {
        let documented: syn::ItemImpl =
            syn::parse_str(include_str!("../docs/expansion.rs")).expect("the documented expansion parses");
        let [syn::ImplItem::Fn(documented)] = &documented.items[..] else {
            panic!("docs/expansion.rs holds one method");
        };
        let args: LockArgs = syn::parse2(quote!("inventory:{sku}", timeout = "10s", client = self.locks)).unwrap();
        let item: MaybeItemFn = syn::parse2(quote!(
            async fn deduct(&self, sku: &str, qty: u32) -> Result<u32, AppError> {
                // Runs only while this process holds the lock `inventory:<sku>`.
                if qty > 100 {
                    return Err(AppError::OutOfStock);
                }
                Ok(100 - qty)
            }
        ))
        .unwrap();
        let real: syn::ImplItemFn = syn::parse2(expand(args, item).unwrap()).unwrap();
        assert_eq!(
            documented.to_token_stream().to_string(),
            real.to_token_stream().to_string(),
            "docs/expansion.rs no longer shows what the attribute writes"
        );
    }

    #[test]
    fn a_typical_method_becomes_one_runtime_call() {
        let out = expand_str(
            quote!("inventory:{sku}", timeout = "10s", client = self.locks),
            quote!(
                async fn deduct(&self, sku: &str, qty: u32) -> Result<u32, AppError> {
                    Ok(qty)
                }
            ),
        )
        .unwrap();
        assert!(out.contains(":: std :: format ! (\"inventory:{}\" , sku)"), "{out}");
        assert!(out.contains("use :: zklock as __zklock ;"), "{out}");
        assert!(
            out.contains("__zklock :: __private :: explicit_client (& (self . locks))"),
            "{out}"
        );
        assert!(out.contains("Duration :: new (10u64 , 0u32)"), "{out}");
        assert!(out.contains("result_converter :: < _ , AppError > ()"), "{out}");
        assert!(
            out.contains(
                "async move { if let :: core :: option :: Option :: Some (__zklock_ret) = \
                 :: core :: option :: Option :: None :: < Result < u32 , AppError > > \
                 { return __zklock_ret ; } Ok (qty) }"
            ),
            "{out}"
        );
    }

    #[test]
    fn impl_trait_in_the_return_type_is_inferred() {
        let out = expand_str(
            quote!("a"),
            quote!(
                async fn f() -> Result<impl std::fmt::Display, E> {
                    Ok(1)
                }
            ),
        )
        .unwrap();
        assert!(out.contains("None :: < Result < _ , E > >"), "{out}");
    }

    #[test]
    fn aliases_are_checked_as_a_whole() {
        let out = expand_str(
            quote!("a"),
            quote!(
                async fn f() -> io::Result<()> {
                    Ok(())
                }
            ),
        )
        .unwrap();
        assert!(out.contains("converter :: < io :: Result < () > > ()"), "{out}");
    }

    #[test]
    fn inner_attributes_stay_at_the_top_of_the_function() {
        let out = expand_str(
            quote!("a"),
            quote!(
                async fn f(x: u8) -> Result<(), E> {
                    #![allow(unused_variables)]
                    Ok(())
                }
            ),
        )
        .unwrap();
        assert!(
            out.contains("-> Result < () , E > { # ! [allow (unused_variables)] use :: zklock as __zklock ;"),
            "{out}"
        );
        assert!(out.contains("{ return __zklock_ret ; } Ok (()) }"), "{out}");
    }

    #[test]
    fn the_crate_path_can_be_given() {
        let out = expand_str(
            quote!("a", crate = app::zk),
            quote!(
                async fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        )
        .unwrap();
        assert!(out.contains("use app :: zk as __zklock ;"), "{out}");
        assert!(!out.contains(":: zklock"), "{out}");
    }

    #[test]
    fn the_crate_is_found_in_the_manifest_or_named_in_the_error() {
        let import = |found| import_found(found).map(|t| t.to_string()).map_err(|e| e.to_string());
        assert_eq!(
            import(Ok(FoundCrate::Name("zk".into()))).unwrap(),
            "use :: zk as __zklock ;"
        );
        assert_eq!(import(Ok(FoundCrate::Itself)).unwrap(), "use :: zklock as __zklock ;");
        assert_eq!(
            import(Err(proc_macro_crate::Error::CargoManifestDirNotSet)).unwrap(),
            "use :: zklock as __zklock ;"
        );
        let err = import(Err(proc_macro_crate::Error::CrateNotFound {
            crate_name: "zklock".into(),
            path: "/app/Cargo.toml".into(),
        }))
        .unwrap_err();
        assert!(err.contains("zklock is not a dependency of this crate"), "{err}");
        assert!(err.contains(r#"`crate = "path::to::zklock"`"#), "{err}");
    }

    /// What `#[async_trait]` makes of `async fn run(&self, job: &str, (a, b): (u8, u8)) -> R`.
    fn async_trait_method(body: TokenStream) -> TokenStream {
        quote!(
            fn run<'life0, 'life1, 'async_trait>(
                &'life0 self,
                job: &'life1 str,
                __arg2: (u8, u8),
            ) -> ::core::pin::Pin<
                Box<dyn ::core::future::Future<Output = Result<u32, AppError>> + ::core::marker::Send + 'async_trait>,
            >
            where
                'life0: 'async_trait,
                Self: 'async_trait,
            {
                Box::pin(async move {
                    if let ::core::option::Option::Some(__ret) = ::core::option::Option::None::<Result<u32, AppError>> {
                        #[allow(unreachable_code)]
                        return __ret;
                    }
                    let __self = self;
                    let (a, b) = {
                        let __arg2 = __arg2;
                        __arg2
                    };
                    let __ret: Result<u32, AppError> = #body;
                    #[allow(unreachable_code)]
                    __ret
                })
            }
        )
    }

    #[test]
    fn async_trait_methods_are_locked_inside_their_future() {
        let out = expand_str(
            quote!("job:{job}:{a}:{self.zone}", client = self.locks),
            async_trait_method(quote!({ Ok(__self.count) })),
        )
        .unwrap();
        assert!(out.contains("Box :: pin (async move {"), "{out}");
        assert!(
            out.contains(
                "let __ret : Result < u32 , AppError > = { use :: zklock as __zklock ; let __zklock_names = \
                 :: std :: vec ! [:: std :: format ! (\"job:{}:{}:{}\" , job , a , __self . zone)]"
            ),
            "{out}"
        );
        assert!(out.contains("explicit_client (& (__self . locks))"), "{out}");
        assert!(
            out.contains(
                "{ return __zklock_ret ; } Ok (__self . count) } ,) . await } ; # [allow (unreachable_code)] __ret"
            ),
            "{out}"
        );

        let err = expand_str(quote!("job:{__arg2}"), async_trait_method(quote!({ Ok(1) }))).unwrap_err();
        assert!(
            err.contains("the parameters of `run` are `self`, `job`, `a`, `b`"),
            "{err}"
        );
    }

    #[test]
    fn other_future_bodies_are_locked_as_a_whole() {
        let out = expand_str(
            quote!("a:{id}"),
            quote!(
                fn f(id: u8) -> impl Future<Output = Result<u8, E>> {
                    let x = 1;
                    async move { Ok(id + x) }
                }
            ),
        )
        .unwrap();
        assert!(
            out.contains("let x = 1 ; async move { use :: zklock as __zklock ; let __zklock_name"),
            "{out}"
        );
        assert!(
            out.contains("{ return __zklock_ret ; } Ok (id + x) } ,) . await } }"),
            "{out}"
        );
    }

    #[test]
    fn misuse_of_the_item() {
        let err = expand_str(
            quote!("a"),
            quote!(
                fn f() -> Result<(), E> {
                    Ok(())
                }
            ),
        )
        .unwrap_err();
        assert!(err.contains("needs an `async fn`"), "{err}");
        let err = expand_str(
            quote!("a"),
            quote!(
                fn f() -> Pin<Box<dyn Future<Output = Result<(), E>>>> {
                    Box::pin(async { Ok(()) })
                }
            ),
        )
        .unwrap_err();
        assert!(err.contains("needs an `async fn`"), "{err}");
        let err = expand_str(
            quote!("a"),
            quote!(
                async fn f() {}
            ),
        )
        .unwrap_err();
        assert!(err.contains("must return `Result<T, E>`"), "{err}");
        let err = expand_str(
            quote!("a"),
            quote!(
                async fn f() -> (u8, u8) {
                    (1, 2)
                }
            ),
        )
        .unwrap_err();
        assert!(err.contains("must return `Result<T, E>`"), "{err}");
        let err = expand_str(
            quote!("a"),
            quote!(
                async fn f() -> Result<(), E>;
            ),
        )
        .unwrap_err();
        assert!(err.contains("with a body"), "{err}");
        let err = expand_str(
            quote!("k:{key}"),
            quote!(
                async fn f(id: u8) -> Result<(), E> {
                    Ok(())
                }
            ),
        )
        .unwrap_err();
        assert!(err.contains("unknown placeholder `{key}`"), "{err}");
        let err = expand_str(
            quote!("k:{id}", token = id),
            quote!(
                async fn f(id: u8) -> Result<(), E> {
                    Ok(())
                }
            ),
        )
        .unwrap_err();
        assert!(err.contains("would hide the parameter `id`"), "{err}");
    }
}
