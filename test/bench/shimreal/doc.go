// Command shimreal benchmarks Switchyard's Lua shim against the Lua it
// replaces: ingress-nginx v1.15.1's own, unmodified balancer.lua and
// configuration.lua (issue 16, item 3). Run it through
// test/bench/shim-real.sh, whose header says how to get the sources.
//
// Two nginx configurations differ only in the Lua tree on
// lua_package_path and two lines of init_by_lua that point the shim at its
// sockets:
//
//	real  ingress-nginx's rootfs/etc/nginx/lua with lua-resty-balancer
//	      (and its librestychash.so, built from chash.c), lua-resty-cookie,
//	      lua-resty-lock and lua-resty-dns
//	shim  the same with this repository's lua/ (balancer.lua,
//	      configuration.lua, switchyard/pick.lua) in front of it, and
//	      `switchyard balancer` as the sidecar
//
// Both get the same /configuration/backends payload through their
// /configuration location, are checked to balance and to agree with each
// other where a pick is determined (fail loudly otherwise; verify.go), and
// are then measured with wrk in alternating rounds, one location per
// balancing case. In: the source paths and the matrix as flags. Out: raw
// samples and a Markdown table on stdout. It imports nothing from this
// module: the shim and the balancer are reached only through nginx and the
// switchyard binary, as in production.
package main
