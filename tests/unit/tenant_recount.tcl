# The tenants' counters (tenantkeys.c: each prefix's key set, value_bytes
# and pending_bytes; acl.c: each user's connection count) are moved by
# hooks, never recounted in running. A counter that drifts is a silent
# defect: one that only grows refuses its tenant for ever under
# tenant-maxmemory, one that shrinks leaves it unbounded and wraps. So a
# seeded random walk drives every path that adds, replaces, moves or
# removes a value under the tenants' prefixes, and after each step
# DEBUG TENANT-CHECK recounts by a walk: its answer must be empty. A
# failure names the seed, the step and the operation: the same seed
# replays the same walk.
#
# The prefixes overlap on purpose: alice has a:* and a:b:* (one tenant,
# the longer covered: a key counted once), carol has a:b:* (another
# tenant: the same key charged to both), bob has b:* and the exact key a:b:x.

proc tc_check {r what} {
    set d [$r debug tenant-check]
    if {$d ne {}} { fail "counters drifted after $what: $d" }
}

proc tc_rand {n} { expr {int(rand() * $n)} }
proc tc_pick {l} { lindex $l [tc_rand [llength $l]] }

# A key under one of the prefixes, or none, from a small set so that
# operations meet existing keys often.
proc tc_key {} {
    set p [tc_pick {a: a:b: b: c: a:b:x}]
    if {$p eq "a:b:x"} { return $p }
    return "$p[tc_rand 6]"
}

proc tc_value {} {
    # Empty, small (copied) and large (placed in the pool while it arrives).
    set n [tc_pick [list 0 1 100 3000 [expr {33000 + [tc_rand 20000]}]]]
    return [string repeat v $n]
}

start_server {tags {acl mooncake} overrides {segment-size 8mb evict-policy lru lease-ttl 1}} {
    test {DEBUG TENANT-CHECK answers the counters that differ from a walk (none here); admin only} {
        r acl setuser t1 on >p ~t1:* +@all -@dangerous
        r set t1:x [string repeat y 40000]
        assert_equal {} [r debug tenant-check]
        set c [redis_client]
        $c auth t1 p
        assert_error {*NOPERM*} {$c debug tenant-check}
        $c close
        r acl deluser t1
        r flushall
    }

    foreach seed {1 2 3 4} {
        test "Random walk over the tenants' keys, seed $seed: every step's recount matches" {
            expr {srand($seed)}
            r flushall
            r config set tenant-maxmemory 0
            r acl setuser alice reset on >pa ~a:* ~a:b:* +@all -@dangerous
            r acl setuser bob reset on >pb ~b:* ~a:b:x +@all -@dangerous
            r acl setuser carol reset on >pc ~a:b:* +@all -@dangerous
            set users {alice pa bob pb carol pc}
            set conns {}
            foreach {u p} $users {
                set cl [redis_client]
                $cl auth $u $p
                lappend conns $cl
            }
            set ops {set set setex getset append incr setrange mset msetnx getdel getex del unlink rename copy
                     expire lazy putstart putend putrevoke putkill restore pin flushall flushasync removeall
                     acl quota auth mount unmount}
            set mounted 0
            for {set step 0} {$step < 300} {incr step} {
                set op [tc_pick $ops]
                # Who runs it: the server's user, or a tenant (refusals are fine).
                set wi [tc_rand 4]
                set who [lindex [concat [list r] $conns] $wi]
                set k [tc_key]
                set k2 [tc_key]
                # Mostly keys the tenant may write, so that its writes run.
                if {$wi > 0 && [tc_rand 4] > 0} {
                    set own [lindex {{a: a:b:} {b: a:b:x} {a:b:}} [expr {$wi - 1}]]
                    set k [tc_pick $own]
                    if {$k ne "a:b:x"} { append k [tc_rand 6] }
                    set k2 [tc_pick $own]
                    if {$k2 ne "a:b:x"} { append k2 [tc_rand 6] }
                }
                set what "seed $seed step $step: $op $k as $who"
                catch {
                    switch $op {
                        set { $who set $k [tc_value] }
                        setex { $who setex $k 100 [tc_value] }
                        getset { $who getset $k [tc_value] }
                        append { $who append $k [tc_value] }
                        incr { $who incr $k }
                        setrange { $who setrange $k [tc_rand 40000] [tc_value] }
                        mset { $who mset $k [tc_value] $k2 [tc_value] }
                        msetnx { $who msetnx $k [tc_value] $k2 [tc_value] }
                        getdel { $who getdel $k }
                        getex { $who getex $k PX 1 }
                        del { $who del $k $k2 }
                        unlink { $who unlink $k }
                        rename { $who rename $k $k2 }
                        copy { $who copy $k $k2 REPLACE }
                        expire { $who pexpire $k 1 }
                        lazy { after 2; $who get $k }
                        putstart { $who put.start $k [expr {1 + [tc_rand 60000]}] {*}[tc_pick {{} REPLACE}] }
                        putend {
                            if {[tc_rand 2]} { $who put.start $k [expr {1 + [tc_rand 60000]}] REPLACE }
                            $who put.end $k
                        }
                        putrevoke { $who put.revoke $k }
                        putkill {
                            set kc [redis_client]
                            set i [expr {2 * [tc_rand 3]}]
                            $kc auth [lindex $users $i] [lindex $users [expr {$i + 1}]]
                            $kc put.start $k 20000
                            $kc close
                            wait_for_condition 100 10 {[llength [r client list]] > 0} else {}
                        }
                        restore {
                            set dump [r dump $k]
                            if {$dump ne {}} { $who restore $k2 0 $dump REPLACE }
                        }
                        pin { $who pin $k HARD }
                        flushall { if {[tc_rand 4] == 0} { $who flushall } }
                        flushasync { if {[tc_rand 4] == 0} { $who flushall async } }
                        removeall { if {[tc_rand 3] == 0} { $who remove.all } }
                        acl {
                            switch [tc_rand 4] {
                                0 { r acl setuser alice resetkeys ~a:* ~a:b:* }
                                1 { r acl setuser alice resetkeys ~a:b:* }
                                2 { r acl setuser carol resetkeys ~a:* ~c:* }
                                3 { r acl setuser carol resetkeys ~a:b:* }
                            }
                        }
                        quota { r config set tenant-maxmemory [tc_pick {0 0 100000 300000 1000000}] }
                        auth {
                            set i [expr {2 * [tc_rand 3]}]
                            set cl [tc_pick $conns]
                            switch [tc_rand 3] {
                                0 { $cl auth [lindex $users $i] [lindex $users [expr {$i + 1}]] }
                                1 { $cl hello 2 auth [lindex $users $i] [lindex $users [expr {$i + 1}]] }
                                2 { $cl reset; $cl auth [lindex $users $i] [lindex $users [expr {$i + 1}]] }
                            }
                        }
                        mount {
                            if {!$mounted} {
                                r mount seg1 1048576 BASE 140737488355328 OWNER proc-1
                                set mounted 1
                            }
                            $who put.start $k 10000 PREFER seg1 REPLICAS 2
                        }
                        unmount {
                            if {$mounted} {
                                r unmount seg1
                                set mounted 0
                            }
                        }
                    }
                } err
                tc_check r $what
            }
            foreach cl $conns { $cl close }
            # Active expiry and the pending sweep run on their own: still exact.
            after 120
            tc_check r "seed $seed: the cron"
            r config set tenant-maxmemory 0
        }
    }
}
