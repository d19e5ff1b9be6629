// Package plugins holds idgen's built-in plugins (package ext): audit, the
// issuance history written as JSON lines, and stats, per-business issuance
// metrics. cmd/idgen registers both; a business enables them with its
// plugins setting (idctl biz update --biz X --plugins audit,stats).
package plugins
