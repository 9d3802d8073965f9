//! Creates: namespace, type and name checks, generateName, server-owned fields.

use super::*;

pub(super) fn check_namespace(st: &State, def: &ResDef, ns: &str, name: &str) -> ApiResult<()> {
    if !def.namespaced {
        return Ok(());
    }
    match st.namespace_state(ns) {
        None => Err(ApiError::not_found("", "namespaces", ns)),
        Some(true) => {
            let mut e = ApiError::forbidden(
                &def.group,
                &def.plural,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            );
            e.message = format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                crate::error::qualified(&def.plural, &def.group)
            );
            Err(e)
        }
        Some(false) => Ok(()),
    }
}

pub(super) fn check_type(def: &ResDef, obj: &Value) -> ApiResult<()> {
    if !obj.is_object() {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    }
    if let Some(av) = obj["apiVersion"].as_str()
        && av != def.api_version()
        && !(def.crd && av.starts_with(&format!("{}/", def.group)))
    {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({av}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    if let Some(k) = obj["kind"].as_str()
        && k != def.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            def.kind
        )));
    }
    Ok(())
}

fn valid_name(def: &ResDef, name: &str) -> Option<String> {
    use regex::Regex;
    use std::sync::OnceLock;
    static SUB: OnceLock<Regex> = OnceLock::new();
    static LABEL: OnceLock<Regex> = OnceLock::new();
    let sub = SUB.get_or_init(|| {
        Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
            .expect("regex")
    });
    let label =
        LABEL.get_or_init(|| Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").expect("regex"));
    if def.group == "rbac.authorization.k8s.io" {
        if name == "." || name == ".." || name.contains('/') || name.contains('%') {
            return Some("may not contain '/' or '%' and may not be '.' or '..'".to_string());
        }
        return None;
    }
    if def.plural == "namespaces" && def.group.is_empty() {
        if name.len() > 63 || !label.is_match(name) {
            return Some("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".into());
        }
        return None;
    }
    if name.len() > 253 || !sub.is_match(name) {
        return Some("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into());
    }
    None
}

fn random_suffix() -> String {
    use rand::Rng;
    const CHARS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut r = rand::rng();
    (0..5)
        .map(|_| CHARS[r.random_range(0..CHARS.len())] as char)
        .collect()
}

fn strip_server_fields(obj: &mut Value) {
    if let Some(m) = obj["metadata"].as_object_mut() {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "managedFields",
            "selfLink",
        ] {
            m.remove(k);
        }
    }
}

pub(super) fn plan_create(
    st: &State,
    t: &Target,
    ctx: &Ctx,
    body: Option<Value>,
    ownership: Ownership,
) -> ApiResult<Plan> {
    let def = &t.def;
    let body = match body {
        Some(b) => b,
        None => ctx.body_value()?,
    };
    check_type(def, &body)?;
    let mut obj = unview(def, &body);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let ns = if def.namespaced {
        let path_ns = ns_of(t).to_string();
        match obj["metadata"]["namespace"].as_str() {
            Some(n) if !n.is_empty() && n != path_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => {}
        }
        obj["metadata"]["namespace"] = json!(path_ns);
        path_ns
    } else {
        obj["metadata"]
            .as_object_mut()
            .map(|m| m.remove("namespace"));
        String::new()
    };
    let mut name = meta_str(&obj, "name").to_string();
    let gen_name = meta_str(&obj, "generateName").to_string();
    if name.is_empty() && !gen_name.is_empty() {
        for _ in 0..10 {
            name = format!("{gen_name}{}", random_suffix());
            if st.get(&def.store_key, &ns, &name).is_none() {
                break;
            }
        }
        obj["metadata"]["name"] = json!(name);
    }
    if name.is_empty() {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            "",
            vec![Cause::new(
                "FieldValueRequired",
                "metadata.name",
                "Required value: name or generateName is required",
            )],
        ));
    }
    if let Some(why) = valid_name(def, &name) {
        return Err(ApiError::invalid(
            &def.group,
            &def.kind,
            &name,
            vec![Cause::invalid("metadata.name", &json!(name), why)],
        ));
    }
    if st.get(&def.store_key, &ns, &name).is_some() {
        return Err(ApiError::already_exists(&def.group, &def.plural, &name));
    }
    let causes = crate::meta::validate(&obj);
    if !causes.is_empty() {
        return Err(ApiError::invalid(&def.group, &def.kind, &name, causes));
    }
    if def.crd
        && st
            .get(
                crate::resources::CRD_KEY,
                "",
                &format!("{}.{}", def.plural, def.group),
            )
            .is_some_and(is_deleting)
    {
        return Err(ApiError::method_not_allowed(
            "create not allowed while custom resource definition is terminating",
        ));
    }
    check_namespace(st, def, &ns, &name)?;
    let requested = obj["metadata"]["managedFields"].clone();
    strip_server_fields(&mut obj);
    let m = &mut obj["metadata"];
    m["uid"] = json!(uuid::Uuid::new_v4().to_string());
    m["creationTimestamp"] = json!(store::now());
    m["generation"] = json!(1);
    if def.status_sub {
        obj.as_object_mut().map(|o| o.remove("status"));
    }
    let mut warnings = Vec::new();
    strategy(st, def, &mut obj, None)?;
    cr_schema(def, &mut obj, None, ctx, &mut warnings, &name)?;
    match ownership {
        Ownership::Update => {
            managed::update(&scope(st, t), &ctx.writer(t), None, &requested, &mut obj)
        }
        Ownership::Decided(m) => m.store(&mut obj),
    }
    let hooks = webhook::matching(st, def, "CREATE", &t.sub, &ns, Some(&view(def, &obj)), None);
    Ok(Plan {
        op: Op::Create,
        ns,
        name,
        old: None,
        new: Some(obj),
        noop: false,
        policy: String::new(),
        warnings,
        hooks,
        code: 201,
    })
}
