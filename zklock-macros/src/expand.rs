//! Code generation: the function keeps its signature; its body becomes one call of
//! `::zklock::__private::run_locked`, which holds all the lock logic.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned, ToTokens};
use syn::parse::{Parse, ParseStream};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{Attribute, GenericArgument, PathArguments, ReturnType, Signature, Type, Visibility};

use crate::args::{LockArgs, ModeArg, OnLostArg, TimeoutArg};

/// A function whose body is kept as raw tokens, so a syntax error inside the body is reported
/// by the compiler on the user's code rather than as a failure of the attribute.
pub struct MaybeItemFn {
    pub attrs: Vec<Attribute>,
    pub vis: Visibility,
    pub sig: Signature,
    pub body: TokenStream,
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
        let body: proc_macro2::Group = input.parse()?;
        if body.delimiter() != proc_macro2::Delimiter::Brace {
            return Err(syn::Error::new(body.span(), "expected the function body `{ … }`"));
        }
        if !input.is_empty() {
            return Err(input.error("unexpected tokens after the function body"));
        }
        Ok(MaybeItemFn {
            attrs,
            vis,
            sig,
            body: body.into_token_stream(),
        })
    }
}

/// Expands the function, or explains what is wrong with it.
pub fn expand(args: LockArgs, item: MaybeItemFn) -> syn::Result<TokenStream> {
    let MaybeItemFn { attrs, vis, sig, body } = item;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new_spanned(
            sig.fn_token,
            "#[distributed_lock] needs an `async fn`: the lock is taken with `.await`",
        ));
    }
    let ret = match &sig.output {
        ReturnType::Type(_, ty) => ty.as_ref(),
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.paren_token.span.close(),
                format!(
                    "a #[distributed_lock] function must return `Result<T, E>` with `E: From<zklock::LockError>`, \
                     so lock errors (timeout, loss, connection) can be returned; `{}` returns `()`",
                    sig.ident
                ),
            ))
        }
    };
    if !matches!(ret, Type::Path(_)) {
        return Err(syn::Error::new_spanned(
            ret,
            "a #[distributed_lock] function must return `Result<T, E>` with `E: From<zklock::LockError>`, \
             so lock errors (timeout, loss, connection) can be returned",
        ));
    }
    let (fmt, fmt_args) = args.name.format_args(&sig)?;

    // Local names of the expansion are hygienic: the body cannot see or clash with them.
    let site = Span::mixed_site();
    let name_var = format_ident!("__zklock_name", span = site);
    let client_var = format_ident!("__zklock_client", span = site);
    let out_var = format_ident!("__zklock_out", span = site);

    let name = if args.name.is_static() {
        let text = unescape_static(&fmt);
        quote!(::std::string::String::from(#text))
    } else {
        quote!(::std::format!(#fmt #(, #fmt_args)*))
    };
    let client = match &args.client {
        Some(expr) => quote_spanned!(expr.span()=> ::zklock::__private::explicit_client(&(#expr))),
        None => quote!(::core::option::Option::None),
    };
    let kind = match args.mode {
        ModeArg::Mutex => quote!(::zklock::LockKind::Mutex),
        ModeArg::Read => quote!(::zklock::LockKind::Read),
        ModeArg::Write => quote!(::zklock::LockKind::Write),
        ModeArg::Semaphore(leases) => quote!(::zklock::LockKind::Semaphore { leases: #leases }),
    };
    let timeout = match args.timeout {
        TimeoutArg::Default => quote!(::zklock::__private::Timeout::Default),
        TimeoutArg::Forever => quote!(::zklock::__private::Timeout::Forever),
        TimeoutArg::After(d) => {
            let ms = d.as_millis() as u64;
            quote!(::zklock::__private::Timeout::After(::core::time::Duration::from_millis(#ms)))
        }
    };
    let on_lost = match args.on_lost {
        OnLostArg::Abort => quote!(::zklock::__private::OnLost::Abort),
        OnLostArg::Continue => quote!(::zklock::__private::OnLost::Continue),
    };
    let ret_infer = infer_impl_trait(ret);
    let converter = converter(ret, &ret_infer);
    let token = match &args.token {
        Some(ident) => quote!(#ident),
        None => quote!(_),
    };

    Ok(quote! {
        #(#attrs)*
        #vis #sig {
            let #name_var = #name;
            let #client_var = #client;
            ::zklock::__private::run_locked(
                #client_var,
                #name_var,
                ::zklock::__private::LockOptions { kind: #kind, timeout: #timeout, on_lost: #on_lost },
                #converter,
                move |#token: ::zklock::FencingToken| async move {
                    let #out_var: #ret_infer = #body;
                    #out_var
                },
            )
            .await
        }
    })
}

/// The call that yields the `LockError` conversion for the return type. For a type written
/// `Result<T, E>`, only `E` is checked, so a missing `From<LockError>` is reported on `E`.
fn converter(ret: &Type, ret_infer: &Type) -> TokenStream {
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
                        return quote_spanned!(err.span()=> ::zklock::__private::result_converter::<_, #err>());
                    }
                }
            }
        }
    }
    quote_spanned!(ret.span()=> ::zklock::__private::converter::<#ret_infer>())
}

/// The type with every `impl Trait` replaced by `_`, for positions where `impl Trait` is not
/// allowed (a `let` annotation, a turbofish).
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

/// The text of a `format!` string without placeholders.
fn unescape_static(fmt: &str) -> String {
    fmt.replace("{{", "{").replace("}}", "}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_str(args: TokenStream, item: TokenStream) -> Result<String, String> {
        let args: LockArgs = syn::parse2(args).map_err(|e| e.to_string())?;
        let item: MaybeItemFn = syn::parse2(item).map_err(|e| e.to_string())?;
        expand(args, item).map(|t| t.to_string()).map_err(|e| e.to_string())
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
        assert!(
            out.contains(":: zklock :: __private :: explicit_client (& (self . locks))"),
            "{out}"
        );
        assert!(out.contains("from_millis (10000u64)"), "{out}");
        assert!(out.contains("result_converter :: < _ , AppError > ()"), "{out}");
        assert!(
            out.contains("let __zklock_out : Result < u32 , AppError > = { Ok (qty) }"),
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
        assert!(out.contains("let __zklock_out : Result < _ , E >"), "{out}");
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
    }
}
