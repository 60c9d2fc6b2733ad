# BATCH.EXISTS numkeys key [key ...] [PREFIX] [LEASE]: the one-round-trip
# probe inference engines send on every request ("how many leading blocks
# of this prompt are stored?"). Per-key answers count only readable
# versions (a pending put is absent, an expired key is absent); PREFIX
# counts the leading keys present and looks no further; LEASE grants the
# same read lease GET.REPLICAS grants, so LEASE.RELEASE ends it and the
# space of a leased version is not reused before. Without LEASE it is
# EXISTS: it does not make a key young for eviction.

set MiB 1048576

proc be_lease {key} {
    set i [r object.info $key]
    if {$i eq ""} { return {} }
    dict get $i lease-ms
}

proc be_field {key field} { dict get [r object.info $key] $field }

start_server {tags {mooncake store} overrides {segment-size 16mb lease-ttl 10000}} {
    r set be:str hello
    r put.start be:obj 100
    r put.end be:obj
    r put.start be:pending 100
    r set be:exp x
    r pexpire be:exp 1
    after 20

    test {Per key: 1 for a complete object or a string, 0 for absent, pending and expired keys} {
        assert_equal {1 0 1 0 0} [r batch.exists 5 be:obj be:none be:str be:pending be:exp]
        assert_equal {1} [r batch.exists 1 be:str]
        # A key given twice is answered twice.
        assert_equal {1 1} [r batch.exists 2 be:obj be:obj]
        # A complete version stays readable while a new one is being put.
        r put.start be:obj 50 REPLACE
        assert_equal {1} [r batch.exists 1 be:obj]
        r put.revoke be:obj
    }

    test {PREFIX: the number of leading keys present, stopping at the first miss} {
        assert_equal 2 [r batch.exists 4 be:obj be:str be:none be:obj PREFIX]
        assert_equal 0 [r batch.exists 3 be:none be:obj be:str PREFIX]
        assert_equal 3 [r batch.exists 3 be:obj be:str be:obj PREFIX]
        assert_equal 1 [r batch.exists 2 be:str be:pending prefix]
        assert_equal 0 [r batch.exists 1 be:exp PREFIX]
    }

    test {Keys named like the options are keys when numkeys covers them} {
        r set PREFIX p
        assert_equal {1 0} [r batch.exists 2 PREFIX LEASE]
        assert_equal 1 [r batch.exists 2 PREFIX LEASE PREFIX]
        r del PREFIX
    }

    test {Without LEASE: no lease, and the key is not made young (as EXISTS)} {
        r set be:cold v
        after 60
        assert_equal {1} [r batch.exists 1 be:cold]
        assert_equal 1 [r exists be:cold]
        assert_equal 0 [be_lease be:cold]
        assert_morethan_equal [be_field be:cold last-access-ms] 50
    }

    test {LEASE grants GET.REPLICAS's lease on each key found, and is a read (the key is young)} {
        set g0 [get_info_field r store store_leases_granted]
        assert_equal {1 0 1} [r batch.exists 3 be:cold be:none be:obj LEASE]
        assert_range [be_lease be:cold] 9000 10000
        assert_range [be_lease be:obj] 9000 10000
        assert_lessthan [be_field be:cold last-access-ms] 50
        assert_equal [expr {$g0 + 2}] [get_info_field r store store_leases_granted]
        # LEASE.RELEASE ends those grants, one per key.
        assert_equal 2 [r lease.release be:cold be:obj]
        assert_equal 0 [be_lease be:cold]
        assert_equal 0 [be_lease be:obj]
        assert_equal 0 [r lease.release be:cold be:obj]
    }

    test {PREFIX LEASE leases only the keys it counted} {
        r set be:a a
        r set be:c c
        assert_equal 1 [r batch.exists 3 be:a be:none be:c LEASE PREFIX]
        assert_range [be_lease be:a] 9000 10000
        assert_equal 0 [be_lease be:c]
        assert_equal 1 [r lease.release be:a]
        assert_equal 0 [r lease.release be:c]
    }

    test {A leased version's space is not reused when it is overwritten, until the lease is released} {
        r set be:big [pattern_bytes $MiB 3]
        set used0 [get_info_field r store store_pool_used]
        assert_equal {1} [r batch.exists 1 be:big LEASE]
        r set be:big [pattern_bytes $MiB 4]
        assert_morethan_equal [get_info_field r store store_pool_used] [expr {$used0 + $MiB}]
        assert_equal 1 [r lease.release be:big]
        assert_equal $used0 [get_info_field r store store_pool_used]
        # Without LEASE nothing is held.
        assert_equal {1} [r batch.exists 1 be:big]
        r set be:big [pattern_bytes $MiB 5]
        assert_equal $used0 [get_info_field r store store_pool_used]
    }

    test {Errors: numkeys out of range or not a number, an unknown option; nothing is leased} {
        set g0 [get_info_field r store store_leases_granted]
        assert_error {*numkeys*} {r batch.exists 0 be:obj}
        assert_error {*numkeys*} {r batch.exists -1 be:obj}
        assert_error {*numkeys*} {r batch.exists 3 be:obj be:str}
        assert_error {*numkeys*} {r batch.exists 9223372036854775807 be:obj}
        assert_error {*not an integer*} {r batch.exists x be:obj}
        assert_error {*syntax*} {r batch.exists 1 be:obj LEASE FOO}
        assert_error {*syntax*} {r batch.exists 1 be:obj be:str}
        assert_error {*wrong number*} {r batch.exists 1}
        assert_error {*wrong number*} {r batch.exists}
        assert_equal $g0 [get_info_field r store store_leases_granted]
    }

    test {COMMAND GETKEYS, GETKEYSANDFLAGS, INFO and DOCS} {
        assert_equal {a b} [r command getkeys batch.exists 2 a b PREFIX]
        assert_equal {a} [r command getkeys batch.exists 1 a LEASE]
        assert_equal {{a {RO access}}} [r command getkeysandflags batch.exists 1 a]
        assert_error {*Invalid arguments*} {r command getkeys batch.exists 5 a b}
        set info [lindex [r command info batch.exists] 0]
        assert_equal batch.exists [lindex $info 0]
        assert_equal -3 [lindex $info 1]
        assert_equal {readonly fast movablekeys} [lindex $info 2]
        assert_equal {@read @fast @store} [lindex $info 6]
        set docs [dict get [r command docs batch.exists] batch.exists]
        assert_equal store [dict get $docs group]
        set names {}
        foreach a [dict get $docs arguments] { lappend names [dict get $a name] }
        assert_equal {numkeys key prefix lease} $names
    }

    test {ACL: a tenant may probe its own keys only (NOPERM for another tenant's)} {
        r set tenantA:1 a
        r set tenantB:1 b
        r acl setuser beta on >p1 ~tenantA:* +@all
        set c [redis_client]
        $c auth beta p1
        assert_equal {1 0} [$c batch.exists 2 tenantA:1 tenantA:2]
        assert_equal 1 [$c batch.exists 1 tenantA:1 PREFIX LEASE]
        assert_error {NOPERM*} {$c batch.exists 2 tenantA:1 tenantB:1}
        assert_error {NOPERM*} {$c batch.exists 1 tenantB:1 PREFIX}
        # The refused command leased nothing.
        assert_equal 0 [be_lease tenantB:1]
        $c close
        r acl deluser beta
    }
}
