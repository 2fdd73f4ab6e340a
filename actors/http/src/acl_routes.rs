//! The ACL API (Nomad's `/v1/acl/*`): bootstrap with the reset index
//! file, policies, tokens (create, update, delete, list, self) and roles;
//! and the resolution a client-only agent asks a server for
//! (`/v1/node/:id/acl/resolve-token`, see `acl_remote`).
//! What each route requires is in `acl_rules::RULES`; the reads a token
//! may make of itself (its own token, its policies and roles) are
//! narrowed down here. A policy write names the rules herder keeps but
//! does not enforce, and a token write a `Global` flag, in `Warnings`.

use super::acl_rules::{caller, denied};
use super::body::Body;
use super::query::{api, decode_json};
use super::ApiError;
use crate::AgentInfo;
use actix_web::{web, HttpRequest, HttpResponse};
use herder::state::StateSnapshot;
use herder::structs::acl::{AclPolicy, AclRole, AclToken};
use herder::structs::unhonoured::join_warnings;
use herder_server::server_api::acl::token_warnings;
use serde_json::{json, Value};

/// The file an operator writes the reset index into to bootstrap again
/// (under the server's data dir, as Nomad).
pub const BOOTSTRAP_RESET_FILE: &str = "acl-bootstrap-reset";

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(
        web::resource("/v1/acl/bootstrap")
            .route(web::put().to(bootstrap))
            .route(web::post().to(bootstrap)),
    )
    .route("/v1/acl/policies", web::get().to(list_policies))
    .service(
        web::resource("/v1/acl/policy/{name}")
            .route(web::get().to(read_policy))
            .route(web::put().to(write_policy))
            .route(web::post().to(write_policy))
            .route(web::delete().to(delete_policy)),
    )
    .route("/v1/acl/tokens", web::get().to(list_tokens))
    .service(
        web::resource("/v1/acl/token")
            .route(web::put().to(create_token))
            .route(web::post().to(create_token)),
    )
    // Before `{accessor}`, which would match it too.
    .route("/v1/acl/token/self", web::get().to(token_self))
    .service(
        web::resource("/v1/acl/token/{accessor}")
            .route(web::get().to(read_token))
            .route(web::put().to(update_token))
            .route(web::post().to(update_token))
            .route(web::delete().to(delete_token)),
    )
    .route("/v1/acl/roles", web::get().to(list_roles))
    .service(
        web::resource("/v1/acl/role")
            .route(web::put().to(create_role))
            .route(web::post().to(create_role)),
    )
    .route("/v1/acl/role/name/{name}", web::get().to(read_role_by_name))
    .service(
        web::resource("/v1/acl/role/{id}")
            .route(web::get().to(read_role))
            .route(web::put().to(update_role))
            .route(web::post().to(update_role))
            .route(web::delete().to(delete_role)),
    )
    .route(
        "/v1/node/{id}/acl/resolve-token",
        web::put().to(resolve_for_node),
    );
}

fn acl_enabled(info: &AgentInfo) -> Result<(), ApiError> {
    if info.config.acl.enabled {
        Ok(())
    } else {
        Err(ApiError::BadRequest("ACL support disabled".into()))
    }
}

fn snapshot(info: &AgentInfo) -> Result<StateSnapshot, ApiError> {
    Ok(api(info)?.snapshot())
}

fn answer(index: u64, value: &impl serde::Serialize) -> HttpResponse {
    HttpResponse::Ok()
        .insert_header(("X-Nomad-Index", index.max(1).to_string()))
        .json(value)
}

/// The reset index the operator wrote, 0 when there is no file.
fn reset_index(info: &AgentInfo) -> Result<u64, ApiError> {
    let path = info.data_dir.join("server").join(BOOTSTRAP_RESET_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map_err(|_| {
            ApiError::BadRequest(format!("invalid reset index in {}", path.display()))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(ApiError::Internal(format!(
            "reading {}: {e}",
            path.display()
        ))),
    }
}

/// `PUT /v1/acl/bootstrap`.
async fn bootstrap(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    acl_enabled(&info)?;
    let token = api(&info)?
        .acl_bootstrap(reset_index(&info)?, chrono::Utc::now())
        .await?;
    Ok(answer(token.modify_index, &token))
}

/// Whether the caller may see `policy`: management (or ACLs off) sees
/// every one, a token the ones it holds, directly or by a role.
fn holds_policy(snap: &StateSnapshot, req: &HttpRequest, policy: &str) -> bool {
    let Some(c) = caller(req) else { return true };
    if c.acl.is_management() {
        return true;
    }
    c.token.as_ref().is_some_and(|t| {
        t.policies.iter().any(|p| p == policy)
            || t.roles.iter().any(|link| {
                snap.acl_role(&link.id)
                    .is_some_and(|r| r.policies.iter().any(|p| p.name == policy))
            })
    })
}

async fn list_policies(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let snap = snapshot(&info)?;
    let list: Vec<Value> = snap
        .acl_policies()
        .filter(|p| holds_policy(&snap, &req, &p.name))
        .map(|p| {
            json!({"Name": p.name, "Description": p.description,
                   "CreateIndex": p.create_index, "ModifyIndex": p.modify_index})
        })
        .collect();
    Ok(answer(
        snap.table_index(herder::state::Table::AclPolicies),
        &list,
    ))
}

async fn read_policy(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let snap = snapshot(&info)?;
    if !holds_policy(&snap, &req, &name) {
        return Err(denied());
    }
    let policy = snap
        .acl_policy(&name)
        .ok_or_else(|| ApiError::NotFound("ACL policy not found".into()))?;
    Ok(answer(policy.modify_index, &**policy))
}

async fn write_policy(
    info: web::Data<AgentInfo>,
    name: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let mut policy: AclPolicy = decode_json(&body)?;
    if policy.name.is_empty() {
        policy.name = name.to_string();
    } else if policy.name != *name {
        return Err(ApiError::BadRequest(
            "ACL policy name does not match request path".into(),
        ));
    }
    let warnings = herder::acl::unenforced_rules(&policy.rules);
    let index = api(&info)?.upsert_acl_policies(vec![policy]).await?;
    if warnings.is_empty() {
        return Ok(answer(index, &Value::Null));
    }
    Ok(answer(
        index,
        &json!({"Warnings": join_warnings(&warnings)}),
    ))
}

/// The body of a client agent's resolution request.
#[derive(serde::Deserialize)]
struct ResolveRequest {
    #[serde(rename = "SecretID", default)]
    secret_id: String,
}

/// `PUT /v1/node/:id/acl/resolve-token`: a client-only agent (its node's
/// `SecretID` checked by the rule) asks what a user's secret resolves to:
/// the token without its secret and its policies (`TokenResolution`), or
/// 403 `ACL token not found` / `ACL token expired`. The secret travels in
/// the body, never in a URL.
async fn resolve_for_node(
    info: web::Data<AgentInfo>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    acl_enabled(&info)?;
    let ask: ResolveRequest = decode_json(&body)?;
    let api = api(&info)?;
    let resolution = api.token_resolution(&ask.secret_id, chrono::Utc::now())?;
    let index = api.snapshot().table_index(herder::state::Table::AclTokens);
    Ok(answer(index, &resolution))
}

/// A token as written, with `Warnings` when it asks for what herder does
/// not do (`Global`: herder has a single region).
fn token_answer(token: &AclToken) -> HttpResponse {
    let warnings = token_warnings(token);
    if warnings.is_empty() {
        return answer(token.modify_index, token);
    }
    let mut body = serde_json::to_value(token).unwrap_or(Value::Null);
    if let Value::Object(fields) = &mut body {
        fields.insert("Warnings".into(), json!(join_warnings(&warnings)));
    }
    answer(token.modify_index, &body)
}

async fn delete_policy(
    info: web::Data<AgentInfo>,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let index = api(&info)?
        .delete_acl_policies(vec![name.into_inner()])
        .await?;
    Ok(answer(index, &Value::Null))
}

async fn list_tokens(info: web::Data<AgentInfo>) -> Result<HttpResponse, ApiError> {
    let snap = snapshot(&info)?;
    let list: Vec<AclToken> = snap.acl_tokens().map(|t| t.redacted()).collect();
    Ok(answer(
        snap.table_index(herder::state::Table::AclTokens),
        &list,
    ))
}

async fn create_token(info: web::Data<AgentInfo>, body: Body) -> Result<HttpResponse, ApiError> {
    let mut token: AclToken = decode_json(&body)?;
    if !token.accessor_id.is_empty() {
        return Err(ApiError::BadRequest(
            "Cannot create a token with an AccessorID; update it at /v1/acl/token/:accessor".into(),
        ));
    }
    token.secret_id.clear();
    let token = api(&info)?
        .upsert_acl_token(token, chrono::Utc::now())
        .await?;
    Ok(token_answer(&token))
}

async fn token_self(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    acl_enabled(&info)?;
    let token = caller(&req)
        .and_then(|c| c.token)
        .ok_or_else(|| ApiError::Forbidden("ACL token not found".into()))?;
    Ok(answer(token.modify_index, &*token))
}

async fn read_token(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    accessor: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let own = caller(&req).is_none_or(|c| {
        c.acl.is_management() || c.token.is_some_and(|t| t.accessor_id == *accessor)
    });
    if !own {
        return Err(denied());
    }
    let snap = snapshot(&info)?;
    let token = snap
        .acl_token(&accessor)
        .ok_or_else(|| ApiError::NotFound("ACL token not found".into()))?;
    Ok(answer(token.modify_index, &**token))
}

async fn update_token(
    info: web::Data<AgentInfo>,
    accessor: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let mut token: AclToken = decode_json(&body)?;
    if !token.accessor_id.is_empty() && token.accessor_id != *accessor {
        return Err(ApiError::BadRequest(
            "Token accessor ID does not match request path".into(),
        ));
    }
    token.accessor_id = accessor.into_inner();
    let token = api(&info)?
        .upsert_acl_token(token, chrono::Utc::now())
        .await?;
    Ok(token_answer(&token))
}

async fn delete_token(
    info: web::Data<AgentInfo>,
    accessor: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let index = api(&info)?
        .delete_acl_tokens(vec![accessor.into_inner()])
        .await?;
    Ok(answer(index, &Value::Null))
}

/// Whether the caller may see `role`: management, or a token holding it.
fn holds_role(req: &HttpRequest, role: &AclRole) -> bool {
    caller(req).is_none_or(|c| {
        c.acl.is_management()
            || c.token
                .is_some_and(|t| t.roles.iter().any(|l| l.id == role.id))
    })
}

async fn list_roles(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
) -> Result<HttpResponse, ApiError> {
    let snap = snapshot(&info)?;
    let list: Vec<&AclRole> = snap
        .acl_roles()
        .filter(|r| holds_role(&req, r))
        .map(|r| &**r)
        .collect();
    Ok(answer(
        snap.table_index(herder::state::Table::AclRoles),
        &list,
    ))
}

async fn create_role(info: web::Data<AgentInfo>, body: Body) -> Result<HttpResponse, ApiError> {
    let role: AclRole = decode_json(&body)?;
    if !role.id.is_empty() {
        return Err(ApiError::BadRequest(
            "ACL role ID must be empty to create".into(),
        ));
    }
    let role = api(&info)?.upsert_acl_role(role).await?;
    Ok(answer(role.modify_index, &role))
}

async fn read_role(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let snap = snapshot(&info)?;
    let role = snap
        .acl_role(&id)
        .filter(|r| holds_role(&req, r))
        .ok_or_else(|| ApiError::NotFound("ACL role not found".into()))?;
    Ok(answer(role.modify_index, &**role))
}

async fn read_role_by_name(
    info: web::Data<AgentInfo>,
    req: HttpRequest,
    name: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let snap = snapshot(&info)?;
    let role = snap
        .acl_role_by_name(&name)
        .filter(|r| holds_role(&req, r))
        .ok_or_else(|| ApiError::NotFound("ACL role not found".into()))?;
    Ok(answer(role.modify_index, &**role))
}

async fn update_role(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
    body: Body,
) -> Result<HttpResponse, ApiError> {
    let mut role: AclRole = decode_json(&body)?;
    if !role.id.is_empty() && role.id != *id {
        return Err(ApiError::BadRequest(
            "ACL role ID does not match request path".into(),
        ));
    }
    role.id = id.into_inner();
    let role = api(&info)?.upsert_acl_role(role).await?;
    Ok(answer(role.modify_index, &role))
}

async fn delete_role(
    info: web::Data<AgentInfo>,
    id: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let index = api(&info)?.delete_acl_roles(vec![id.into_inner()]).await?;
    Ok(answer(index, &Value::Null))
}
