# Key expiry: EXPIRE/PEXPIRE/TTL/PTTL/PERSIST, SET EX/PX, lazy expiry on
# access and active expiry of keys nobody touches.

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
