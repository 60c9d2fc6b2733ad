# Key expiry: EXPIRE/PEXPIRE/EXPIREAT/PEXPIREAT and their NX|XX|GT|LT,
# TTL/PTTL/EXPIRETIME/PEXPIRETIME/PERSIST, SET EX/PX, which commands keep a
# key's TTL, lazy expiry on access and active expiry of keys nobody
# touches.

start_server {tags {expire}} {
    test {TTL and PTTL of a missing key are -2} {
        r del nokey
        assert_equal -2 [r ttl nokey]
        assert_equal -2 [r pttl nokey]
    }

    test {TTL and PTTL of a key without expiry are -1} {
        r set k v
        assert_equal -1 [r ttl k]
        assert_equal -1 [r pttl k]
    }

    test {EXPIRE sets a time to live} {
        r set k v
        assert_equal 1 [r expire k 100]
        assert_range [r ttl k] 99 100
        assert_range [r pttl k] 98000 100000
    }

    test {PEXPIRE sets a time to live in milliseconds} {
        r set k v
        assert_equal 1 [r pexpire k 100000]
        assert_range [r pttl k] 98000 100000
        assert_range [r ttl k] 98 100
    }

    test {TTL rounds to the nearest second} {
        r set k v
        r pexpire k 1500
        assert_range [r ttl k] 1 2
    }

    test {EXPIRE and PEXPIRE on a missing key return 0} {
        r del nokey
        assert_equal 0 [r expire nokey 100]
        assert_equal 0 [r pexpire nokey 100]
        r exists nokey
    } {0}

    test {EXPIRE replaces an earlier time to live} {
        r set k v
        r expire k 1000
        r expire k 50
        assert_range [r ttl k] 45 50
        r expire k 5000
        assert_range [r ttl k] 4990 5000
    }

    test {EXPIRE with a non-positive time deletes the key} {
        r set k v
        assert_equal 1 [r expire k 0]
        assert_equal 0 [r exists k]
        r set k v
        assert_equal 1 [r pexpire k -10]
        r exists k
    } {0}

    test {EXPIRE with a non-integer time is an error} {
        r set k v
        assert_error {ERR value is not an integer or out of range*} {r expire k abc}
        assert_error {ERR value is not an integer or out of range*} {r pexpire k 1.5}
        r ttl k
    } {-1}

    test {PERSIST removes the time to live} {
        r set k v EX 100
        assert_equal 1 [r persist k]
        assert_equal -1 [r ttl k]
        assert_equal 0 [r persist k]
        r del nokey
        assert_equal 0 [r persist nokey]
        r get k
    } {v}

    test {A key with PX goes away after its time} {
        r set short v PX 200
        assert_equal 1 [r exists short]
        wait_for_condition 100 20 {[r exists short] == 0} else {
            fail "key with PX 200 still exists"
        }
        assert_equal {} [r get short]
        assert_equal -2 [r ttl short]
    }

    test {A key with EXPIRE goes away after its time} {
        r set short v
        r expire short 1
        assert_equal v [r get short]
        wait_for_condition 150 20 {[r get short] eq ""} else {
            fail "key with EXPIRE 1 still readable"
        }
    }

    test {A key with SET EX stays readable until its time passes} {
        r set soon v EX 1
        after 300
        assert_equal v [r get soon]
        wait_for_condition 150 20 {[r exists soon] == 0} else {
            fail "key with EX 1 still exists"
        }
    }

    test {An expired key is gone for every command} {
        r set gone v PX 50
        after 150
        assert_equal {} [r get gone]
        assert_equal 0 [r exists gone]
        assert_equal none [r type gone]
        assert_equal 0 [r strlen gone]
        assert_equal {{}} [r mget gone]
        assert_equal {} [r keys gone]
        assert_equal 0 [r del gone]
    }

    test {SET without EX clears the time to live} {
        r set k v EX 100
        r set k v2
        assert_equal -1 [r ttl k]
        r set k v EX 100
        r set k v3 XX
        assert_equal -1 [r ttl k]
    }

    test {SET with EX replaces the time to live} {
        r set k v EX 1000
        r set k v PX 50000
        assert_range [r pttl k] 45000 50000
    }

    test {SET on an expired key creates a fresh key} {
        r set k v PX 50
        after 120
        assert_equal OK [r set k new NX]
        assert_equal -1 [r ttl k]
        r get k
    } {new}

    test {DEL of a key with a time to live} {
        r set k v EX 100
        assert_equal 1 [r del k]
        r ttl k
    } {-2}

    test {EXPIREAT and PEXPIREAT set an absolute time} {
        set at [expr {[clock seconds] + 1000}]
        r set k v
        assert_equal 1 [r expireat k $at]
        assert_equal $at [r expiretime k]
        assert_equal [expr {$at * 1000}] [r pexpiretime k]
        assert_range [r ttl k] 998 1000
        assert_equal 1 [r pexpireat k [expr {$at * 1000 + 123}]]
        assert_equal [expr {$at * 1000 + 123}] [r pexpiretime k]
        r expiretime k
    } [expr {[clock seconds] + 1000}]

    test {EXPIREAT and PEXPIREAT in the past delete the key} {
        r set k v
        assert_equal 1 [r expireat k 1]
        assert_equal 0 [r exists k]
        r set k v
        assert_equal 1 [r pexpireat k [expr {[clock milliseconds] - 1000}]]
        assert_equal 0 [r exists k]
        assert_equal 0 [r expireat k 1]
        assert_equal 0 [r pexpireat k 4102444800000]
    }

    test {EXPIRETIME and PEXPIRETIME of a missing key and of a key without expiry} {
        r del nokey
        r set k v
        list [r expiretime nokey] [r pexpiretime nokey] [r expiretime k] [r pexpiretime k]
    } {-2 -2 -1 -1}

    test {EXPIRETIME rounds to the nearest second} {
        r set k v
        r pexpireat k 4102444800499
        assert_equal 4102444800 [r expiretime k]
        r pexpireat k 4102444800500
        r expiretime k
    } {4102444801}

    # The rounding added 500 to the time in ms: a key expiring within 500 ms
    # of LLONG_MAX overflowed it (undefined behaviour; a sanitizer build
    # died on it). Found by tests/helpers/redis_diff.py on an ASan build.
    test {EXPIRETIME of a key expiring at the largest time there is} {
        r set k v
        assert_equal 1 [r pexpireat k 9223372036854775807]
        assert_equal 9223372036854775807 [r pexpiretime k]
        assert_equal 9223372036854776 [r expiretime k]
        r pexpireat k 9223372036854775307
        assert_equal 9223372036854775 [r expiretime k]
        assert_morethan [r ttl k] 9223370000000000
        r del k
    } {1}

    test {EXPIREAT NX, XX, GT and LT} {
        r set k v
        assert_equal 0 [r expireat k 4102444800 XX]
        assert_equal 0 [r expireat k 4102444800 GT]
        assert_equal 1 [r expireat k 4102444800 LT]
        assert_equal 0 [r expireat k 4102444900 NX]
        assert_equal 1 [r expireat k 4102444900 XX]
        assert_equal 0 [r expireat k 4102444800 GT]
        assert_equal 0 [r expireat k 4102444900 GT]
        assert_equal 1 [r expireat k 4102445000 gt]
        assert_equal 0 [r expireat k 4102445000 LT]
        assert_equal 1 [r pexpireat k 4102444999999 lt]
        assert_equal 0 [r pexpireat k 4102444999999 XX GT] ;# XX and GT go together
        assert_equal 1 [r pexpireat k 4102445000000 XX GT]
        r pexpiretime k
    } {4102445000000}

    test {EXPIRE NX on a key without expiry, GT never on one} {
        r set k v
        assert_equal 0 [r expire k 100 GT]
        assert_equal 1 [r expire k 100 NX]
        assert_equal 0 [r expire k 200 NX]
        r set k v
        assert_equal 1 [r pexpire k 100000 LT]
        assert_range [r ttl k] 99 100
    }

    test {Expire options: errors, checked before the time} {
        r set k v
        foreach cmd {expire pexpire expireat pexpireat} {
            assert_error {ERR NX and XX, GT or LT options at the same time are not compatible*} {r $cmd k 100 NX XX}
            assert_error {ERR NX and XX, GT or LT options at the same time are not compatible*} {r $cmd k 100 NX GT}
            assert_error {ERR GT and LT options at the same time are not compatible*} {r $cmd k 100 GT LT}
            assert_error {ERR Unsupported option FOO*} {r $cmd k 100 FOO}
            assert_error {ERR Unsupported option foo*} {r $cmd k abc foo}
            assert_error {ERR value is not an integer or out of range*} {r $cmd k abc}
            assert_error {ERR value is not an integer or out of range*} {r $cmd k abc NX}
        }
        assert_error {ERR invalid expire time in 'expireat' command*} {r expireat k 9223372036854775807}
        assert_error {ERR invalid expire time in 'expire' command*} {r expire k 9223372036854775807}
        assert_error {ERR invalid expire time in 'pexpire' command*} {r pexpire k 9223372036854775807}
        assert_equal 1 [r pexpireat k 9223372036854775807]
        r pexpiretime k
    } {9223372036854775807}

    test {Which commands keep the time to live} {
        set keep {}
        foreach {setup cmd} {
            {set k 1} {incr k}
            {set k 1} {decrby k 2}
            {set k 1} {incrbyfloat k 0.5}
            {set k a} {append k b}
            {set k a} {setrange k 0 b}
            {set k a} {setbit k 0 1}
            {set k a} {getex k}
            {set k a} {set k b KEEPTTL}
            {set k a} {set k b}
            {set k a} {getset k b}
            {set k a} {mset k b}
            {set k a} {setex k 200 b}
            {set k a} {getex k PERSIST}
        } {
            r {*}$setup
            r expire k 100
            r {*}$cmd
            lappend keep [lindex $cmd 0] [expr {[r ttl k] == 100 ? "kept" : [r ttl k]}]
        }
        set keep
    } {incr kept decrby kept incrbyfloat kept append kept setrange kept setbit kept getex kept set kept set -1 getset -1 mset -1 setex 200 getex -1}

    test {RENAME moves the time to live; COPY copies it} {
        r del k2 k3
        r set k v EX 100
        r set k2 w EX 1000
        r rename k k2
        assert_range [r ttl k2] 99 100
        r set k v
        r rename k k2
        assert_equal -1 [r ttl k2]
        r set k v EX 100
        assert_equal 1 [r copy k k3]
        assert_range [r ttl k3] 99 100
        assert_range [r ttl k] 99 100
        r set k v
        assert_equal 1 [r copy k k3 REPLACE]
        r ttl k3
    } {-1}

    test {TTL, EXPIRETIME and TYPE do not count as an access} {
        r set idle v
        after 1100
        r ttl idle
        r pttl idle
        r expiretime idle
        r type idle
        assert_morethan_equal [r object idletime idle] 1
        r get idle
        r object idletime idle
    } {0}

    test {Active expiry removes keys nobody touches} {
        r flushall
        set before [get_info_field r stats expired_keys]
        set rd [redis_deferring_client]
        set buf {}
        for {set i 0} {$i < 1000} {incr i} {
            append buf [::redis::format_command set ak:$i v PX 100]
        }
        $rd write $buf
        $rd flush
        for {set i 0} {$i < 1000} {incr i} {
            assert_equal OK [$rd read]
        }
        $rd close
        assert_equal 1000 [r dbsize]
        # Only DBSIZE from now on: it must not expire anything itself.
        wait_for_condition 100 50 {[r dbsize] == 0} else {
            fail "active expiry left [r dbsize] of 1000 keys"
        }
        assert_morethan_equal [get_info_field r stats expired_keys] [expr {$before + 1000}]
    }

    test {Active expiry leaves keys without expiry alone} {
        r flushall
        for {set i 0} {$i < 100} {incr i} {
            r set keep:$i v
            r set drop:$i v PX 50
        }
        wait_for_condition 100 50 {[r dbsize] == 100} else {
            fail "dbsize is [r dbsize], expected 100"
        }
        lsort [r keys drop:*]
    } {}
}
