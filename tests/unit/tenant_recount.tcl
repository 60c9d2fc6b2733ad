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

# Also called inside an operation's catch (which takes refusals): a drift
# is remembered there and failed on after it.
proc tc_check {r what} {
    set d [$r debug tenant-check]
    if {$d ne {}} {
        set ::tc_drift "counters drifted after $what: $d"
        fail $::tc_drift
    }
}

# A tenant's line of INFO tenants as a dict (objects, bytes, indexed, connections).
proc tenant_usage {client name} {
    set d {}
    foreach kv [split [get_info_field $client tenants tenant_$name] ,] {
        lassign [split $kv =] k v
        dict set d $k $v
    }
    return $d
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

start_server {tags {acl mooncake} overrides {segment-size 4mb}} {
set ::tc_other_host [srv 0 host]
set ::tc_other_port [srv 0 port]
r acl setuser alice on >pa ~a:* ~a:b:* +@all -@dangerous +flushall
r acl setuser carol on >pc ~a:b:* +@all -@dangerous
start_server {tags {acl mooncake} overrides {segment-size 4mb evict-policy lru lease-ttl 1 owner-ttl 20 owner-probe-timeout 0}} {
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

    test {A tenant's connection closed by the idle timeout is uncounted} {
        r acl setuser t2 on >p ~t2:* +@all -@dangerous
        set c [redis_client]
        $c auth t2 p
        assert_match {*connections=1*} [get_info_field r tenants tenant_t2]
        r config set timeout 1
        wait_for_condition 100 50 {[string match {*connections=0*} [get_info_field r tenants tenant_t2]]} else {
            fail "the idle connection still counted"
        }
        r config set timeout 0
        assert_equal {} [r debug tenant-check]
        catch {$c close}
        r acl deluser t2
    }

    test {A put no one ends is given back by the sweep (put-timeout), and its charge with it} {
        r acl setuser t3 on >p ~t3:* +@all -@dangerous
        r config set put-timeout 10
        r config set put-release-timeout 10
        set c [redis_client]
        $c auth t3 p
        $c put.start t3:p 20000
        assert_morethan [dict get [tenant_usage r t3] bytes] 20000
        assert_equal {} [r debug tenant-check]
        wait_for_condition 100 20 {[dict get [tenant_usage r t3] bytes] == 0} else {
            fail "the abandoned put is still charged"
        }
        assert_equal {} [r debug tenant-check]
        assert_error {*NOKEY*} {$c put.end t3:p}
        r config set put-timeout 30000
        r config set put-release-timeout 600000
        $c close
        r acl deluser t3
    }

    foreach seed {1 2 3 4} {
        test "Random walk over the tenants' keys, seed $seed: every step's recount matches" {
            expr {srand($seed)}
            r flushall
            r config set tenant-maxmemory 0
            r acl setuser alice reset on >pa ~a:* ~a:b:* +@all -@dangerous +flushall
            r acl setuser bob reset on >pb ~b:* ~a:b:x +@all -@dangerous +flushall
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
                     acl quota auth mount unmount replicaclear clientkill deluser pause maxmemory ownerdeath
                     getreplicas batchput hold multi migrate fill fill}
            set mounted 0
            set ::tc_drift {}
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
                        }
                        restore {
                            set dump [r dump $k]
                            if {$dump ne {}} { $who restore $k2 0 $dump REPLACE }
                        }
                        pin { $who pin $k HARD }
                        flushall { if {[tc_rand 10] == 0} { $who flushall } }
                        flushasync { if {[tc_rand 10] == 0} { $who flushall async } }
                        fill {
                            # Large values: the pool (or maxmemory) evicts, anyone's.
                            for {set i 0} {$i < 3} {incr i} { $who set [tc_key] [string repeat f [expr {200000 + [tc_rand 300000]}]] }
                        }
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
                        replicaclear { $who replica.clear 2 $k $k2 }
                        batchput {
                            $who batch.put.start 2 $k [expr {1 + [tc_rand 40000]}] $k2 [expr {1 + [tc_rand 40000]}]
                            $who batch.put.end $k $k2
                        }
                        hold { $who hold.replicas $k $k2 }
                        multi {
                            # A transaction that writes, moves a prefix and writes again.
                            r multi
                            r set $k [tc_value]
                            r acl setuser carol resetkeys ~a:b:* ~[tc_pick {c: a: b:}]*
                            r append $k2 [tc_value]
                            r exec
                        }
                        migrate {
                            # Both directions: the key leaves one server and is restored on the other.
                            set dst [tc_pick [list [list $::tc_other_host $::tc_other_port] [list [srv 0 host] [srv 0 port]]]]
                            if {[lindex $dst 1] == [srv 0 port]} {
                                set src [srv -1 client]
                            } else {
                                set src r
                            }
                            catch { $src set $k [tc_value] }
                            $src migrate [lindex $dst 0] [lindex $dst 1] $k 0 5000 REPLACE
                            tc_check [srv -1 client] "$what (the other server)"
                        }
                        getreplicas { $who get.replicas $k }
                        clientkill {
                            # A tenant's connection killed (by id or by user), then opened again.
                            set i [tc_rand 3]
                            set cl [lindex $conns $i]
                            set id [$cl client id]
                            if {[tc_rand 2]} { r client kill id $id } else { r client kill user [lindex $users [expr {2 * $i}]] }
                            catch {$cl close}
                            set cl [redis_client]
                            $cl auth [lindex $users [expr {2 * $i}]] [lindex $users [expr {2 * $i + 1}]]
                            lset conns $i $cl
                            if {$wi == $i + 1} { set who $cl }
                        }
                        deluser {
                            # carol goes (her connections closed) and comes back.
                            r acl deluser carol
                            r acl setuser carol on >pc ~a:b:* +@all -@dangerous
                            catch {[lindex $conns 2] close}
                            set cl [redis_client]
                            $cl auth carol pc
                            lset conns 2 $cl
                        }
                        pause {
                            # Writes held, then run when the pause ends.
                            r client pause 20 WRITE
                            $who set $k [tc_value]
                        }
                        maxmemory {
                            r config set maxmemory [tc_pick {0 1000000 1500000 4000000}]
                        }
                        ownerdeath {
                            # An owner mounts, a value is put there, the owner's
                            # connection goes: its segment goes at owner-ttl.
                            set oc [redis_client]
                            $oc mount oseg 1048576 BASE 140737488355328 OWNER proc-o
                            catch { $who put.start $k 5000 PREFER oseg }
                            catch { $who put.end $k }
                            tc_check r "$what (mounted)"
                            $oc close
                            wait_for_condition 200 10 {[string first oseg [r segments]] < 0} else {
                                set ::tc_drift "the owner's segment stayed"
                            }
                        }
                    }
                } err
                if {$::tc_drift ne {}} { fail $::tc_drift }
                tc_check r $what
                # A connection closed by a kill, a DELUSER or a timeout
                # (its user may have changed by AUTH) is opened again.
                for {set i 0} {$i < 3} {incr i} {
                    set cl [lindex $conns $i]
                    if {![catch {$cl ping}]} continue
                    catch {$cl close}
                    set cl [redis_client]
                    $cl auth [lindex $users [expr {2 * $i}]] [lindex $users [expr {2 * $i + 1}]]
                    lset conns $i $cl
                }
            }
            foreach cl $conns { $cl close }
            # Active expiry and the pending sweep run on their own: still exact.
            after 120
            tc_check r "seed $seed: the cron"
            r config set tenant-maxmemory 0
        }
    }
}
}
