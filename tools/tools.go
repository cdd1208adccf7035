// Package tools exists so that this module has a package; its tool
// directives in go.mod are what matter.
package tools
