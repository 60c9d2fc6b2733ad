# tenant-maxmemory (tenantquota.c): one tenant's values are bounded, and a
# tenant's write past its bound evicts that tenant's own least recently
# used values, never another tenant's; when its own evictable values are
# not enough, -OOM (-NOSPACE for a put) names the bound. Without it, one
# tenant filling the pool evicted everyone's values (PROTOCOL.md, "Space is
# shared"). Mooncake-only: Redis has no per-user memory bound.

# A tenant's line of INFO tenants as a dict (objects, bytes, indexed).
proc tenant_usage {client name} {
    set line [get_info_field $client tenants tenant_$name]
    set d {}
    foreach kv [split $line ,] {
        lassign [split $kv =] k v
        dict set d $k $v
    }
    return $d
}

start_server {tags {acl mooncake} overrides {segment-size 4mb evict-policy lru}} {
    r acl setuser alice on >pa ~tenantA:* +@all -@dangerous +info
    r acl setuser bob on >pb ~tenantB:* +@all -@dangerous +info
    set ca [redis_client]
    $ca auth alice pa
    set cb [redis_client]
    $cb auth bob pb

    test {A hostile tenant filling the pool evicts only its own values, never another tenant's} {
        r flushall
        r config set tenant-maxmemory 1500000
        # bob caches 20 values of 40 KB, then goes quiet: the oldest in the pool.
        for {set i 0} {$i < 20} {incr i} { $cb set tenantB:k$i [string repeat b 40000] }
        # alice writes 10 times the pool, small values and large ones (>= 32 KiB
        # are placed in the pool while their bytes arrive) alternately.
        for {set i 0} {$i < 200} {incr i} {
            set n [expr {$i % 2 ? 100000 : 20000}]
            assert_equal OK [$ca set tenantA:k$i [string repeat a $n]]
            assert_lessthan_equal [dict get [tenant_usage r alice] bytes] 1500000
        }
        for {set i 0} {$i < 20} {incr i} { assert_equal 40000 [$cb strlen tenantB:k$i] }
        assert_equal 20 [$cb dbsize]
        # alice's newest value is there: its own oldest went first.
        assert_equal 100000 [$ca strlen tenantA:k199]
        assert_morethan [s tenant_evicted_keys] 0
    }

    test {Eviction within a tenant looks at a bounded number of its keys per eviction (DEBUG VISITS)} {
        r flushall
        r config set tenant-maxmemory 1000000
        r config resetstat
        r debug visits reset
        # Many small keys: far more than one sample, so a walk would show.
        for {set i 0} {$i < 3000} {incr i} { $ca set tenantA:s$i [string repeat x 1000] }
        set evicted [s tenant_evicted_keys]
        assert_morethan $evicted 0
        set visits [dict get [r debug visits] tenant-evict]
        assert_lessthan_equal $visits [expr {$evicted * 16 * 8}]
        assert_lessthan_equal [dict get [tenant_usage r alice] bytes] 1000000
    }

    test {At its bound a tenant evicts its least recently used value first; pinned values make it -OOM naming the bound} {
        r flushall
        r config set tenant-maxmemory 1000000
        for {set i 1} {$i <= 4} {incr i} {
            $ca set tenantA:k$i [string repeat a 200000]
            after 3 ;# distinct access times (the LRU clock is in ms)
        }
        $ca get tenantA:k1 ;# k1 is now the most recent: k2 is the oldest
        after 3
        $ca set tenantA:k5 [string repeat a 200000]
        assert_equal 0 [$ca exists tenantA:k2]
        assert_equal 4 [$ca exists tenantA:k1 tenantA:k3 tenantA:k4 tenantA:k5]
        # Every value of its own hard-pinned: nothing to evict, the write is
        # refused and changes nothing.
        foreach k {k1 k3 k4 k5} { assert_equal OK [r pin tenantA:$k HARD] }
        set before [dict get [tenant_usage r alice] bytes]
        # 10 KB left: a small value (copied from the command) does not fit either.
        r config set tenant-maxmemory [expr {$before + 10000}]
        assert_error {*OOM*tenant-maxmemory*} {$ca set tenantA:k6 [string repeat a 200000]}
        assert_error {*OOM*tenant-maxmemory*} {$ca set tenantA:k6 [string repeat a 20000]}
        assert_equal 0 [$ca exists tenantA:k6]
        assert_equal 4 [$ca exists tenantA:k1 tenantA:k3 tenantA:k4 tenantA:k5]
        assert_equal $before [dict get [tenant_usage r alice] bytes]
        # A put is refused with the put's word.
        assert_error {*NOSPACE*tenant-maxmemory*} {$ca put.start tenantA:p 200000}
        # Overwriting a value with one as large needs no room.
        assert_equal OK [$ca set tenantA:k5 [string repeat b 200000]]
        # Other users are not bound: the server's own user writes on.
        assert_equal OK [r set other:k [string repeat c 200000]]
        foreach k {k1 k3 k4 k5} { r unpin tenantA:$k }
        # A value the bound could never hold evicts nothing.
        assert_error {*OOM*tenant-maxmemory*} {$ca set tenantA:huge [string repeat z 1100000]}
        assert_equal 4 [$ca exists tenantA:k1 tenantA:k3 tenantA:k4 tenantA:k5]
    }

    test {Puts in progress count against the bound, and the tenant's own values make room for them} {
        r flushall
        r config set tenant-maxmemory 1000000
        for {set i 0} {$i < 4} {incr i} { $ca set tenantA:v$i [string repeat a 200000] }
        set reps [$ca put.start tenantA:p1 300000]
        assert_equal 1 [llength $reps]
        # A value had to go for the put (4*200k + 300k is over the bound).
        assert_equal 3 [$ca exists tenantA:v0 tenantA:v1 tenantA:v2 tenantA:v3]
        set u [dict get [tenant_usage r alice] bytes]
        assert_lessthan_equal $u 1000000
        assert_morethan $u 900000
        $ca put.revoke tenantA:p1
        assert_lessthan [dict get [tenant_usage r alice] bytes] 700000
    }

    test {CONFIG SET lowering the bound: the tenant's next write evicts its own values down to it} {
        r flushall
        r config set tenant-maxmemory 2000000
        for {set i 0} {$i < 8} {incr i} { $ca set tenantA:k$i [string repeat a 200000] }
        for {set i 0} {$i < 4} {incr i} { $cb set tenantB:k$i [string repeat b 200000] }
        assert_equal 8 [$ca dbsize]
        r config set tenant-maxmemory 500000
        assert_equal 500000 [lindex [r config get tenant-maxmemory] 1]
        # Lowering evicts nothing by itself.
        assert_equal 8 [$ca dbsize]
        # Any write of the tenant's brings it under (APPEND is checked before it runs).
        $ca append tenantA:new x
        assert_lessthan_equal [dict get [tenant_usage r alice] bytes] 500000
        assert_equal 4 [$cb dbsize]
        # bob's next write does the same to bob's values only.
        $cb set tenantB:x y
        assert_lessthan_equal [dict get [tenant_usage r bob] bytes] 500000
        assert_morethan [$ca dbsize] 0
        r config set tenant-maxmemory 0
        for {set i 0} {$i < 8} {incr i} { $ca set tenantA:k$i [string repeat a 200000] }
        assert_morethan [dict get [tenant_usage r alice] bytes] 1600000
    }

    test {INFO tenants: the server's users see every tenant; a tenant sees only its own line} {
        r flushall
        $ca set tenantA:a [string repeat a 5000]
        $cb set tenantB:a [string repeat b 7000]
        $cb set tenantB:b [string repeat b 7000]
        set a [tenant_usage r alice]
        set b [tenant_usage r bob]
        assert_equal 1 [dict get $a objects]
        assert_equal 2 [dict get $b objects]
        assert_equal 1 [dict get $a indexed]
        # The charge: the pool extent, plus the key and a 48-byte header.
        assert_morethan_equal [dict get $a bytes] [expr {5000 + 10 + 48}]
        assert_lessthan [dict get $a bytes] 6000
        assert_equal $a [tenant_usage $ca alice]
        assert_equal {} [get_info_field $ca tenants tenant_bob]
        assert_equal {} [get_info_field $cb tenants tenant_alice]
        assert_equal $b [tenant_usage $cb bob]
        # Removing and flushing give everything back.
        $cb del tenantB:a tenantB:b
        assert_equal {objects 0 bytes 0 indexed 1 connections 1} [tenant_usage r bob]
        r flushall async
        assert_equal {objects 0 bytes 0 indexed 1 connections 1} [tenant_usage r alice]
    }

    test {A tenant added later is counted from what it already holds (ACL SETUSER)} {
        r flushall
        r set tenantC:a [string repeat c 10000]
        r put.start tenantC:p 20000
        r acl setuser carol on >pc ~tenantC:* +@all -@dangerous
        set c [tenant_usage r carol]
        assert_equal 1 [dict get $c objects]
        assert_morethan [dict get $c bytes] 30000
        r put.revoke tenantC:p
        r del tenantC:a
        assert_equal {objects 0 bytes 0 indexed 1 connections 0} [tenant_usage r carol]
        r acl deluser carol
    }
}

# tenant-maxclients (acl.c): connections authenticated as one tenant user.
# Without it one tenant could take every connection up to maxclients.
start_server {tags {acl mooncake}} {
    r acl setuser alice on >pa ~tenantA:* +@all -@dangerous
    r acl setuser bob on >pb ~tenantB:* +@all -@dangerous

    test {tenant-maxclients: the connection past it is refused at AUTH and HELLO, the others go on} {
        r config set tenant-maxclients 2
        set a1 [redis_client]
        set a2 [redis_client]
        set a3 [redis_client]
        assert_equal OK [$a1 auth alice pa]
        assert_equal OK [$a2 auth alice pa]
        assert_error {*max number of clients reached for this user (tenant-maxclients)*} {$a3 auth alice pa}
        assert_error {*tenant-maxclients*} {$a3 hello 3 auth alice pa}
        # A wrong password is told as always: the limit is only for who holds it.
        assert_error {WRONGPASS*} {$a3 auth alice nope}
        # The refused connection stayed what it was (default, here).
        assert_equal default [$a3 acl whoami]
        # AUTH again on one of its own connections adds none.
        assert_equal OK [$a1 auth alice pa]
        # Other users are not counted against alice.
        assert_equal OK [$a3 auth bob pb]
        assert_equal 2 [dict get [tenant_usage r alice] connections]
        assert_equal 1 [dict get [tenant_usage r bob] connections]
        assert_equal 2 [s tenant_rejected_connections]
        # Changing alice's rules keeps her connections counted.
        r acl setuser alice +info
        assert_equal 2 [dict get [tenant_usage r alice] connections]
        # A connection that leaves alice (to another user, RESET, closing) frees its place.
        assert_equal OK [$a2 auth bob pb]
        assert_equal OK [$a3 auth alice pa]
        assert_error {*tenant-maxclients*} {$a2 auth alice pa}
        assert_equal RESET [$a1 reset]
        assert_equal OK [$a2 auth alice pa]
        $a2 close
        wait_for_condition 100 10 {[dict get [tenant_usage r alice] connections] == 1} else {
            fail "the closed connection still counted"
        }
        assert_equal OK [$a1 auth alice pa]
        # The server's users are not bounded by it.
        set d1 [redis_client]
        set d2 [redis_client]
        set d3 [redis_client]
        assert_equal PONG [$d3 ping]
        r config set tenant-maxclients 0
        set a4 [redis_client]
        assert_equal OK [$a4 auth alice pa]
        assert_equal 3 [dict get [tenant_usage r alice] connections]
        foreach cl [list $a1 $a3 $a4 $d1 $d2 $d3] { $cl close }
    }

    test {Deleting a tenant closes and uncounts its connections; made again, it starts from none} {
        r config set tenant-maxclients 1
        set a1 [redis_client]
        assert_equal OK [$a1 auth alice pa]
        r acl deluser alice
        r acl setuser alice on >pa ~tenantA:* +@all -@dangerous
        assert_equal 0 [dict get [tenant_usage r alice] connections]
        set a2 [redis_client]
        assert_equal OK [$a2 auth alice pa]
        $a2 close
        catch {$a1 close}
        r config set tenant-maxclients 0
    }
}
