//! `#[aten]`: an ATen operator written as one typed function.
//!
//! ```ignore
//! /// `x.clamp(min, max)` on tensors' elements.
//! #[aten("aten::hardtanh", dtypes = NUMERIC, shard = Sharding::pointwise(Lin::No))]
//! fn hardtanh_op(a: Hardtanh<'_>) -> Result<Tensor> {
//!     hardtanh(a.self_, a.min_val.to_f64(), a.max_val.to_f64())
//! }
//! ```
//!
//! The attribute looks the overload up in PyTorch's schemas (`tpuemu-schema`: every ATen
//! overload of PyTorch 2.15.0) and generates, next to the function:
//! - the argument struct named by the function's (last) parameter type — here `Hardtanh<'a>`,
//!   one public field per schema argument in schema order, typed from the schema (`Tensor` →
//!   `&Tensor`, `Tensor?` → `Option<&Tensor>`, `int[]` → `Vec<i64>`, `Scalar` → `Scalar`,
//!   `ScalarType?` → `Option<DType>`, ...; `self` is spelled `self_`), its `NAME` and
//!   `SCHEMA` text as constants, and `bind`, which reads it from the bound argument list (the
//!   registry fills in the schema's defaults before, so every field has its value);
//! - `__aten_<function>() -> OpDef`: the registration — the overload's name from the schema,
//!   the implementation kind (`kind = Decomposition` / `View`; `Kernel` when not given), the
//!   `dtypes` and the `shard` rule given, and a runner that binds the struct, calls the
//!   function and turns its result (`Tensor`, a tuple of tensors, `Vec<Tensor>`, `Vec<Value>`,
//!   `()`) into the calling convention's values.
//!
//! The backend's build script finds every `#[aten]` function under `src/ops` and lists their
//! registrations, so an operator needs no edit outside its own function (and its test).
//!
//! `optional = "attn_bias"` types a required `Tensor` argument as `Option<&Tensor>`: PyTorch's
//! autograd passes an undefined tensor there in some calls (the attention backwards' bias).
//!
//! `numbers = "other"` types a `Tensor` (or `Tensor?`) argument as `TensorOrNumber` (or
//! `Option<TensorOrNumber>`): the schema binder keeps a Python number passed there (`x + 2`
//! reaches `add.Tensor` with `other = 2`), and the operator computes with it as a scalar. On a
//! `Scalar` argument it keeps a tensor passed there as a tensor (`linspace`'s ends).
//!
//! The function takes the struct alone, or `(rt: &Runtime, args: Struct)` when it needs the
//! runtime. Or, with `call = Struct(expr, ...)`, the attribute sits on the operator's own Rust
//! function, whatever its parameters: the runner binds `Struct`, names its fields (and `rt`)
//! and calls the function with the expressions given, so an operator that is a plain function
//! needs no adapter:
//!
//! ```ignore
//! #[aten("aten::select.int", dtypes = ALL_TPU, kind = View, call = SelectInt(self_, dim, index))]
//! pub fn select(x: &Tensor, dim: i64, index: i64) -> Result<Tensor> { ... }
//! ```
//! A name PyTorch does not have, a missing `dtypes`, or a schema type the struct
//! cannot hold is a compile error at the attribute.

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as Tokens};
use quote::{format_ident, quote};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::{Expr, FnArg, Ident, ItemFn, LitStr, Token, Type as SynType};
use tpuemu_schema::{Schema, Type};

/// See the crate's documentation.
#[proc_macro_attribute]
pub fn aten(attr: TokenStream, item: TokenStream) -> TokenStream {
    let attr = syn::parse_macro_input!(attr as Attr);
    let func = syn::parse_macro_input!(item as ItemFn);
    match expand(attr, func) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// `"name", key = expr, ...`.
struct Attr {
    name: LitStr,
    options: Vec<(Ident, Expr)>,
}

impl Parse for Attr {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: LitStr = input.parse()?;
        let mut options = Vec::new();
        if input.parse::<Option<Token![,]>>()?.is_some() {
            let rest = Punctuated::<syn::MetaNameValue, Token![,]>::parse_terminated(input)?;
            for kv in rest {
                let key = kv.path.get_ident().cloned().ok_or_else(|| {
                    syn::Error::new_spanned(&kv.path, "expected `dtypes`, `shard` or `kind`")
                })?;
                options.push((key, kv.value));
            }
        }
        Ok(Attr { name, options })
    }
}

fn expand(attr: Attr, func: ItemFn) -> syn::Result<Tokens> {
    let mut name = attr.name.value();
    if !name.contains("::") {
        name = format!("aten::{name}");
    }
    let schema = tpuemu_schema::aten::get(&name).ok_or_else(|| {
        syn::Error::new_spanned(
            &attr.name,
            format!("{name} is not an ATen overload of PyTorch 2.15.0"),
        )
    })?;
    let (mut dtypes, mut shard, mut kind, mut via) = (None, None, None, None);
    let mut optional: Vec<String> = Vec::new();
    let mut numbers: Vec<String> = Vec::new();
    for (key, value) in attr.options {
        match key.to_string().as_str() {
            "dtypes" => dtypes = Some(value),
            "shard" => shard = Some(value),
            "kind" => kind = Some(value),
            "call" => via = Some(call_of(value)?),
            "optional" => optional = names(&value, "optional")?,
            "numbers" => numbers = names(&value, "numbers")?,
            _ => {
                return Err(syn::Error::new_spanned(
                    key,
                    "unknown option: expected `dtypes`, `shard`, `kind`, `optional`, `numbers` or `call`",
                ));
            }
        }
    }
    let dtypes = dtypes.ok_or_else(|| {
        syn::Error::new_spanned(
            &attr.name,
            "say which input dtypes the operator supports: `dtypes = FLOATING`",
        )
    })?;
    let kind = match kind {
        Some(k) => quote!(crate::ops::OpImpl::#k),
        None => quote!(crate::ops::OpImpl::Kernel),
    };
    let shard = shard.map(|s| quote!(.shard(#s)));

    let params: Vec<&FnArg> = func.sig.inputs.iter().collect();
    let takes_runtime = match (params.len(), &via) {
        (_, Some(_)) => false,
        (1, None) => false,
        (2, None) => true,
        _ => {
            return Err(syn::Error::new_spanned(
                &func.sig,
                "an #[aten] function takes its argument struct, or (rt: &Runtime, args: Struct)",
            ));
        }
    };
    let strukt = match &via {
        Some((s, _)) => s.clone(),
        None => struct_name(params[params.len() - 1])?,
    };
    for (option, list) in [("optional", &optional), ("numbers", &numbers)] {
        if let Some(bad) = list
            .iter()
            .find(|n| !schema.args.iter().any(|a| &a.name == *n))
        {
            return Err(syn::Error::new_spanned(
                &attr.name,
                format!("`{option}`: {name} has no argument `{bad}`"),
            ));
        }
    }
    let fields = fields(schema, &strukt, &optional, &numbers)?;
    let field_decls = fields.iter().map(|f| {
        let (name, ty, doc) = (&f.name, &f.ty, &f.doc);
        quote!(#[doc = #doc] pub #name: #ty,)
    });
    let field_binds = fields.iter().map(|f| {
        let (name, read) = (&f.name, &f.read);
        quote!(#name: #read,)
    });
    let fname = &func.sig.ident;
    let reg = format_ident!("__aten_{}", fname);
    let text = schema.to_string();
    let doc = format!("The arguments of `{text}`, typed (generated by `#[aten]`).");
    let call = if let Some((_, exprs)) = &via {
        let names = fields.iter().map(|f| &f.name);
        quote!({
            let _ = rt;
            #[allow(unused_variables)]
            let #strukt { #(#names,)* .. } = #strukt::bind(args)?;
            // By path: a field may have the function's name.
            self::#fname(#(#exprs),*)
        })
    } else if takes_runtime {
        quote!(#fname(rt, #strukt::bind(args)?))
    } else {
        quote!({
            let _ = rt;
            #fname(#strukt::bind(args)?)
        })
    };
    Ok(quote! {
        #[doc = #doc]
        #[allow(dead_code, non_snake_case)]
        pub struct #strukt<'a> {
            #(#field_decls)*
            #[doc(hidden)]
            pub _args: ::std::marker::PhantomData<&'a ()>,
        }

        impl<'a> #strukt<'a> {
            /// The overload's name.
            #[allow(dead_code)]
            pub const NAME: &'static str = #name;
            /// The overload's schema, as PyTorch prints it.
            #[allow(dead_code)]
            pub const SCHEMA: &'static str = #text;

            /// Reads the arguments from a list bound to the schema (defaults filled in).
            #[allow(clippy::needless_question_mark, unused_variables)]
            pub fn bind(args: &'a crate::ops::Args) -> crate::error::Result<Self> {
                Ok(#strukt {
                    #(#field_binds)*
                    _args: ::std::marker::PhantomData,
                })
            }
        }

        #func

        /// The registration of the function above (listed by the backend's build script).
        pub(crate) fn #reg() -> crate::ops::OpDef {
            crate::ops::OpDef::new(#name, #kind, #dtypes, |rt, args| {
                Ok(crate::ops::IntoValues::into_values(#call?))
            })
            #shard
        }
    })
}

/// The argument names a string option lists: `optional = "a, b"`.
fn names(value: &Expr, option: &str) -> syn::Result<Vec<String>> {
    match value {
        Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s),
            ..
        }) => Ok(s.value().split(',').map(|n| n.trim().to_string()).collect()),
        other => Err(syn::Error::new_spanned(
            other,
            format!("`{option}` is a string of argument names: {option} = \"other\""),
        )),
    }
}

/// `call = Struct(expr, ...)`: the struct's name and the expressions the function is called with.
fn call_of(value: Expr) -> syn::Result<(Ident, Vec<Expr>)> {
    let wrong = |e: &Expr| {
        syn::Error::new_spanned(
            e,
            "`call` names the argument struct and the function's arguments: call = Struct(self_, &dim)",
        )
    };
    let Expr::Call(c) = &value else {
        return Err(wrong(&value));
    };
    let Expr::Path(p) = &*c.func else {
        return Err(wrong(&value));
    };
    let strukt = p.path.get_ident().cloned().ok_or_else(|| wrong(&value))?;
    Ok((strukt, c.args.iter().cloned().collect()))
}

/// The struct's name: the last segment of the parameter's type (`Hardtanh<'_>` → `Hardtanh`).
fn struct_name(param: &FnArg) -> syn::Result<Ident> {
    let FnArg::Typed(p) = param else {
        return Err(syn::Error::new_spanned(
            param,
            "an #[aten] function is a free function",
        ));
    };
    match &*p.ty {
        SynType::Path(tp) => tp
            .path
            .segments
            .last()
            .map(|s| s.ident.clone())
            .ok_or_else(|| syn::Error::new_spanned(&p.ty, "expected the argument struct's name")),
        other => Err(syn::Error::new_spanned(
            other,
            "the argument struct is taken by value: `args: AddTensor<'_>`",
        )),
    }
}

/// One generated field.
struct Field {
    name: Ident,
    ty: Tokens,
    read: Tokens,
    doc: String,
}

/// Rust's keywords, which an argument name cannot be spelled as.
const KEYWORDS: &[&str] = &[
    "as", "async", "await", "box", "break", "const", "continue", "crate", "dyn", "else", "enum",
    "extern", "false", "fn", "for", "gen", "if", "impl", "in", "let", "loop", "match", "mod",
    "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait",
    "true", "try", "type", "unsafe", "use", "where", "while", "yield",
];

fn fields(
    schema: &Schema,
    strukt: &Ident,
    optional: &[String],
    numbers: &[String],
) -> syn::Result<Vec<Field>> {
    let mut out = Vec::new();
    for (i, arg) in schema.args.iter().enumerate() {
        let name = if KEYWORDS.contains(&arg.name.as_str()) {
            format!("{}_", arg.name)
        } else {
            arg.name.clone()
        };
        // `optional = "name"`: a `Tensor` the caller may leave undefined although the schema
        // requires it (PyTorch's autograd passes an undefined attention bias to the attention
        // backwards for an unmasked call; the schema binder keeps it as `None`).
        let ty = match &arg.ty {
            Type::Tensor(a) if optional.contains(&arg.name) => {
                Type::Optional(Box::new(Type::Tensor(a.clone())))
            }
            t => t.clone(),
        };
        // `numbers = "other"`: a `Tensor` (or `Tensor?`) argument that may hold a Python number
        // (the binder keeps a number there: `x + 2` reaches `add.Tensor` with `other = 2`), or a
        // `Scalar` one that may hold a one-element tensor read on the device (`linspace`).
        let number = numbers.contains(&arg.name);
        let typed = if number {
            match &ty {
                Type::Tensor(_) | Type::Scalar => Some((
                    quote!(crate::ops::TensorOrNumber<'a>),
                    quote!(args.tensor_or_number(#i)?),
                )),
                Type::Optional(t) if t.is_tensor() => Some((
                    quote!(Option<crate::ops::TensorOrNumber<'a>>),
                    quote!(match args.get(#i) { None => None, Some(_) => Some(args.tensor_or_number(#i)?) }),
                )),
                _ => None,
            }
        } else {
            typed(&ty, i)
        };
        let (ty, read) = typed.ok_or_else(|| {
            syn::Error::new(
                strukt.span(),
                format!(
                    "{}: argument `{}` has type `{}`, which #[aten] cannot type",
                    schema.full_name(),
                    arg.name,
                    arg.ty
                ),
            )
        })?;
        let doc = match &arg.default {
            Some(d) => format!("`{} {}={d}`", arg.ty, arg.name),
            None => format!("`{} {}`", arg.ty, arg.name),
        };
        out.push(Field {
            name: Ident::new(&name, Span::call_site()),
            ty,
            read,
            doc,
        });
    }
    Ok(out)
}

/// The Rust type of a schema type and the expression reading argument `i` of `args` as it.
fn typed(ty: &Type, i: usize) -> Option<(Tokens, Tokens)> {
    let opt = matches!(ty, Type::Optional(_));
    let inner = match ty {
        Type::Optional(t) => t,
        t => t,
    };
    let element = |t: &Type| match t {
        Type::Optional(e) => (true, (**e).clone()),
        e => (false, e.clone()),
    };
    Some(match (inner, opt) {
        (Type::Tensor(_), false) => (quote!(&'a crate::tensor::Tensor), quote!(args.tensor(#i)?)),
        (Type::Tensor(_), true) => (
            quote!(Option<&'a crate::tensor::Tensor>),
            quote!(args.opt_tensor(#i)?),
        ),
        (Type::Int | Type::SymInt, false) => (quote!(i64), quote!(args.int(#i)?)),
        (Type::Int | Type::SymInt, true) => (quote!(Option<i64>), quote!(args.opt_int(#i)?)),
        (Type::Float, false) => (quote!(f64), quote!(args.float(#i)?)),
        (Type::Float, true) => (quote!(Option<f64>), quote!(args.opt_float(#i)?)),
        (Type::Bool, false) => (quote!(bool), quote!(args.bool(#i)?)),
        (Type::Bool, true) => (quote!(Option<bool>), quote!(args.opt_bool(#i)?)),
        (Type::Str, false) => (quote!(&'a str), quote!(args.str(#i)?)),
        (Type::Str, true) => (quote!(Option<&'a str>), quote!(args.opt_str(#i)?)),
        (Type::Scalar, false) => (quote!(crate::dtype::Scalar), quote!(args.scalar(#i)?)),
        (Type::Scalar, true) => (
            quote!(Option<crate::dtype::Scalar>),
            quote!(args.opt_scalar(#i)?),
        ),
        (Type::ScalarType, false) => (quote!(crate::dtype::DType), quote!(args.dtype(#i)?)),
        (Type::ScalarType, true) => (
            quote!(Option<crate::dtype::DType>),
            quote!(args.opt_dtype(#i)?),
        ),
        (Type::MemoryFormat, _) => (
            quote!(Option<crate::ops::MemoryFormat>),
            quote!(args.opt_memory_format(#i)?),
        ),
        (Type::Layout | Type::Device | Type::Generator, _) => {
            (quote!(Option<&'a crate::ops::Value>), quote!(args.get(#i)))
        }
        (Type::List(e, _), o) => {
            let (elem_opt, e) = element(e);
            let (t, r) = match (e, elem_opt) {
                (Type::Tensor(_), false) => (
                    quote!(Vec<crate::tensor::Tensor>),
                    quote!(args.tensors(#i)?),
                ),
                (Type::Tensor(_), true) => (
                    quote!(Vec<Option<crate::tensor::Tensor>>),
                    quote!(args.opt_tensors(#i)?),
                ),
                (Type::Int | Type::SymInt, false) => (quote!(Vec<i64>), quote!(args.ints(#i)?)),
                (Type::Float, false) => (quote!(Vec<f64>), quote!(args.floats(#i)?)),
                (Type::Bool, false) => (quote!(Vec<bool>), quote!(args.bools(#i)?)),
                (Type::Scalar, false) => {
                    (quote!(Vec<crate::dtype::Scalar>), quote!(args.scalars(#i)?))
                }
                _ => return None,
            };
            if o {
                (
                    quote!(Option<#t>),
                    quote!(match args.get(#i) { None => None, Some(_) => Some(#r) }),
                )
            } else {
                (t, r)
            }
        }
        _ => return None,
    })
}
