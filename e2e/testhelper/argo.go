package main

import (
	"context"
	"fmt"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// argoHealth runs a custom health check as Argo CD runs one configured in argocd-cm
// (resource.customizations.health.<group>_<kind>, useOpenLibs unset): a fresh interpreter with
// only the package, base and table libraries (no string, math or io: a script must not rely on
// them), a one-second deadline, the object as the global `obj`, and the table the chunk returns
// read as {status, message}. A status Argo CD does not know becomes Unknown, as in Argo CD.
//
// Argo CD also loads a restricted `os` library; this helper leaves it out, which is stricter. And
// gitops-engine answers "Progressing: Pending deletion" for an object with a deletionTimestamp
// before it runs any script; the scripts handle that case themselves, so this helper runs them
// unconditionally to test them.
func argoHealth(script string, obj map[string]interface{}) (result, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{
		{lua.LoadLibName, lua.OpenPackage},
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
	} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(lib.open), NRet: 0, Protect: true}, lua.LString(lib.name)); err != nil {
			return result{}, fmt.Errorf("opening Lua library %q: %w", lib.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	L.SetContext(ctx)
	L.SetGlobal("obj", toLua(L, obj))
	if err := L.DoString(script); err != nil {
		return result{}, err
	}
	ret := L.Get(-1)
	table, ok := ret.(*lua.LTable)
	if !ok {
		return result{}, fmt.Errorf("expect table output from Lua script, not %s", ret.Type())
	}
	status, err := stringField(table, "status")
	if err != nil {
		return result{}, err
	}
	message, err := stringField(table, "message")
	if err != nil {
		return result{}, err
	}
	switch status {
	case "Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown":
	default:
		return result{Status: "Unknown", Message: "Lua returned an invalid health status"}, nil
	}
	return result{Status: status, Message: message}, nil
}

// stringField reads a string field of the returned table; Argo CD decodes the table as JSON into
// a struct of strings, so any other type is an error there too.
func stringField(t *lua.LTable, key string) (string, error) {
	switch v := t.RawGetString(key).(type) {
	case *lua.LNilType:
		return "", nil
	case lua.LString:
		return string(v), nil
	default:
		return "", fmt.Errorf("health %s is a %s, not a string", key, v.Type())
	}
}

// toLua converts a decoded JSON value the way Argo CD hands objects to Lua: objects become
// tables with string keys (a null member is simply absent), arrays become sequences starting at
// 1, numbers become Lua numbers.
func toLua(L *lua.LState, v interface{}) lua.LValue {
	switch t := v.(type) {
	case bool:
		return lua.LBool(t)
	case int64:
		return lua.LNumber(t)
	case float64:
		return lua.LNumber(t)
	case string:
		return lua.LString(t)
	case []interface{}:
		arr := L.CreateTable(len(t), 0)
		for _, x := range t {
			arr.Append(toLua(L, x))
		}
		return arr
	case map[string]interface{}:
		tbl := L.CreateTable(0, len(t))
		for k, x := range t {
			tbl.RawSetH(lua.LString(k), toLua(L, x))
		}
		return tbl
	default:
		return lua.LNil
	}
}
