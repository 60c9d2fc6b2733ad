# Transactions: MULTI/EXEC/DISCARD, errors while queueing (EXECABORT) and
# while running (in EXEC's array), WATCH/UNWATCH against other clients,
# expiry, FLUSHALL and eviction, RESP3's nil, the commands refused inside
# MULTI, store commands and values read in place inside a transaction,
# and redis-py's pipelines and optimistic locking. Tests without the
# mooncake tag are Redis 7 behaviour and pass against redis-server too.

start_server {tags {multi}} {
    test {MULTI / EXEC: commands are queued and run together} {
        r del a b
        assert_equal OK [r multi]
        assert_equal QUEUED [r set a 1]
        assert_equal QUEUED [r set b 2]
        assert_equal QUEUED [r mget a b]
        assert_equal {OK OK {1 2}} [r exec]
    }

    test {Queued commands are not run before EXEC} {
        r del a
        set other [redis_client]
        r multi
        r set a queued
        assert_equal 0 [$other exists a]
        r exec
        assert_equal queued [$other get a]
        $other close
    }

    test {EXEC of an empty transaction is an empty array} {
        r multi
        assert_equal {} [r exec]
        assert_equal {*0} [r lastheader]
    }

    test {DISCARD drops the queue} {
        r set a before
        r multi
        r set a after
        assert_equal OK [r discard]
        r get a
    } {before}

    test {MULTI calls can not be nested, and the transaction goes on} {
        r multi
        assert_error {ERR MULTI calls can not be nested} {r multi}
        r set a nested
        assert_equal {OK} [r exec]
        r get a
    } {nested}

    test {EXEC and DISCARD without MULTI} {
        assert_error {ERR EXEC without MULTI} {r exec}
        assert_error {ERR DISCARD without MULTI} {r discard}
    }

    test {An unknown command while queueing aborts the transaction (EXECABORT)} {
        r set a untouched
        r multi
        r set a changed
        assert_error {ERR unknown command*} {r nosuchcommand foo}
        r set b changed
        assert_error {EXECABORT Transaction discarded because of previous errors.} {r exec}
        assert_equal untouched [r get a]
        # The transaction is over.
        assert_error {ERR EXEC without MULTI} {r exec}
    }

    test {A wrong arity while queueing aborts the transaction} {
        r set a untouched
        r multi
        r set a changed
        assert_error {ERR wrong number of arguments for 'set' command} {r set a}
        assert_error {EXECABORT*} {r exec}
        r get a
    } {untouched}

    test {A refused subcommand while queueing aborts the transaction} {
        r multi
        assert_error {ERR unknown subcommand*} {r config nosuchsub}
        assert_error {EXECABORT*} {r exec}
    }

    test {Runtime errors inside EXEC are returned in place and the rest runs} {
        r del a b
        r set s notanumber
        r multi
        r set a 1
        r set b 2 BADOPTION
        r expire a notanumber
        r set b 3
        r readraw 1
        set head [r exec]
        set items {}
        for {set i 0} {$i < 4} {incr i} { lappend items [r read] }
        r readraw 0
        assert_equal {*4} $head
        assert_equal {+OK} [lindex $items 0]
        assert_match {-ERR syntax error*} [lindex $items 1]
        assert_match {-ERR value is not an integer*} [lindex $items 2]
        assert_equal {+OK} [lindex $items 3]
        assert_equal 1 [r get a]
        r get b
    } {3}

    test {EXEC with arguments is refused and ends the transaction} {
        r multi
        r set a x
        assert_error {EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command} {r exec extra}
        assert_error {ERR EXEC without MULTI} {r exec}
    }

    test {EXEC in a RESP2 subscriber's context is refused as an EXECABORT} {
        set c [redis_client]
        $c subscribe ch
        assert_error {EXECABORT*only (P|S)SUBSCRIBE*} {$c exec}
        assert_error {ERR Can't execute 'multi'*} {$c multi}
        $c close
    }

    test {WATCH inside MULTI is an error that does not abort the transaction} {
        r multi
        assert_error {ERR WATCH inside MULTI is not allowed} {r watch a}
        r set a fromtx
        assert_equal {OK} [r exec]
        r get a
    } {fromtx}

    test {QUIT inside MULTI runs at once} {
        set c [redis_client]
        $c multi
        assert_equal OK [$c quit]
        $c close
    }

    test {RESET inside MULTI discards the transaction and the WATCHes} {
        set c [redis_client]
        $c set a beforereset
        $c watch a
        $c multi
        $c set a inreset
        assert_equal RESET [$c reset]
        assert_equal beforereset [$c get a]
        assert_error {ERR EXEC without MULTI} {$c exec}
        r set a touched
        $c multi
        $c set a afterreset
        assert_equal {OK} [$c exec]
        $c close
    }

    test {MONITOR inside a transaction is an error in EXEC's array} {
        r multi
        r monitor
        r ping
        set res [r exec]
        assert_match {*MONITOR isn't allowed for DENY BLOCKING client*} [lindex $res 0]
        assert_equal PONG [lindex $res 1]
        assert_equal PONG [r ping]
    }

    test {CLIENT LIST shows a transaction in progress} {
        # CLIENT LIST would be queued too: look from another connection.
        set other [redis_client]
        r multi
        r set a 1
        r set b 2
        set line {}
        foreach l [split [$other client list] "\n"] {
            if {[string match "*cmd=multi*" $l] || [string match "*flags=x*" $l]} { set line $l }
        }
        r discard
        $other close
        assert_match {*flags=x*} $line
        assert_match {* multi=2 *} $line
    }

    test {SLOWLOG has the commands of a transaction, not EXEC} {
        r config set slowlog-log-slower-than 0
        r slowlog reset
        r multi
        r set slowtx 1
        r exec
        r config set slowlog-log-slower-than 10000
        set names {}
        foreach e [r slowlog get] { lappend names [string tolower [lindex $e 3 0]] }
        assert {"set" in $names}
        assert {"multi" in $names}
        assert {"exec" ni $names}
    }

    # ---- WATCH --------------------------------------------------------------

    test {EXEC runs when a WATCHed key was not modified} {
        r set w 1
        r watch w
        r multi
        r set w 2
        assert_equal {OK} [r exec]
        r get w
    } {2}

    test {EXEC fails (nil) when another client modified a WATCHed key} {
        set other [redis_client]
        r set w 1
        r watch w
        $other set w 100
        r multi
        r set w 2
        assert_equal {} [r exec]
        assert_equal {*-1} [r lastheader]
        $other close
        r get w
    } {100}

    test {EXEC fails when this client modified the key before MULTI} {
        r set w 1
        r watch w
        r set w 5
        r multi
        r set w 6
        assert_equal {} [r exec]
        r get w
    } {5}

    test {EXEC fails when a missing WATCHed key is created} {
        set other [redis_client]
        r del w
        r watch w
        $other set w created
        r multi
        r get w
        assert_equal {} [r exec]
        $other close
    }

    test {A missing WATCHed key that stays missing does not fail EXEC} {
        set other [redis_client]
        r del w
        r watch w
        $other del w
        r multi
        r get w
        assert_equal {{}} [r exec]
        $other close
    }

    test {DEL and EXPIRE of a WATCHed key fail EXEC; PERSIST without a TTL does not} {
        set other [redis_client]
        r set w 1
        r watch w
        $other del w
        r multi
        r ping
        assert_equal {} [r exec]

        r set w 1
        r watch w
        $other expire w 100
        r multi
        r ping
        assert_equal {} [r exec]

        r set w 1
        r watch w
        assert_equal 0 [$other persist w]
        r multi
        r ping
        assert_equal {PONG} [r exec]
        $other close
    }

    test {MSET of a WATCHed key among others fails EXEC} {
        set other [redis_client]
        r watch w x y
        $other mset q 1 y 2
        r multi
        r ping
        assert_equal {} [r exec]
        $other close
    }

    test {WATCH of several keys: any one modified fails EXEC} {
        set other [redis_client]
        r mset w1 1 w2 2 w3 3
        r watch w1 w2
        r watch w3
        $other set w3 changed
        r multi
        r ping
        assert_equal {} [r exec]
        $other close
    }

    test {UNWATCH forgets the WATCHed keys} {
        set other [redis_client]
        r set w 1
        r watch w
        $other set w 2
        assert_equal OK [r unwatch]
        r multi
        r set w 3
        assert_equal {OK} [r exec]
        $other close
        r get w
    } {3}

    test {EXEC unwatches: a later transaction is not failed by the old WATCH} {
        set other [redis_client]
        r set w 1
        r watch w
        r multi
        r ping
        r exec
        $other set w 2
        r multi
        r ping
        assert_equal {PONG} [r exec]
        $other close
    }

    test {A failed EXEC unwatches too} {
        set other [redis_client]
        r set w 1
        r watch w
        $other set w 2
        r multi
        r ping
        assert_equal {} [r exec]
        $other set w 3
        r multi
        r ping
        assert_equal {PONG} [r exec]
        $other close
    }

    test {DISCARD unwatches} {
        set other [redis_client]
        r set w 1
        r watch w
        r multi
        r ping
        r discard
        $other set w 2
        r multi
        r ping
        assert_equal {PONG} [r exec]
        $other close
    }

    test {WATCH on a key that expires before EXEC fails EXEC} {
        r del w
        r set w 1 px 50
        r watch w
        after 120
        r multi
        r ping
        assert_equal {} [r exec]
    }

    test {WATCH on a key already expired does not fail EXEC} {
        r del w
        r set w 1 px 1
        after 20
        r watch w
        # Deleting the expired key (a lookup) changes nothing anyone saw.
        assert_equal 0 [r exists w]
        r multi
        r ping
        assert_equal {PONG} [r exec]
    }

    test {A key expired when WATCHed but then written fails EXEC} {
        set other [redis_client]
        r del w
        r set w 1 px 1
        after 20
        r watch w
        $other set w new
        r multi
        r ping
        assert_equal {} [r exec]
        $other close
    }

    test {FLUSHALL fails EXEC when a WATCHed key existed} {
        set other [redis_client]
        r set w 1
        r watch w
        $other flushall
        r multi
        r ping
        assert_equal {} [r exec]
        $other close
    }

    test {FLUSHALL does not fail EXEC when the WATCHed key did not exist} {
        set other [redis_client]
        r del w
        r watch w
        $other flushall
        r multi
        r ping
        assert_equal {PONG} [r exec]
        $other close
    }

    test {FLUSHDB fails EXEC when a WATCHed key existed} {
        set other [redis_client]
        r set w 1
        r watch w
        $other flushdb
        r multi
        r ping
        assert_equal {} [r exec]
        $other close
    }

    test {Two clients WATCH the same key: both fail after a write} {
        set c1 [redis_client]
        set c2 [redis_client]
        r set w 1
        $c1 watch w
        $c2 watch w
        r set w 2
        $c1 multi
        $c1 ping
        $c2 multi
        $c2 ping
        assert_equal {} [$c1 exec]
        assert_equal {} [$c2 exec]
        $c1 close
        $c2 close
    }

    test {A client that WATCHes and disconnects leaves nothing behind} {
        set c1 [redis_client]
        $c1 watch w w2 w3
        $c1 close
        # The key is written with nobody watching; this must not touch a
        # freed client (a sanitizer build would report it).
        r set w 1
        r set w2 1
        r ping
    } {PONG}

    test {The commands of a transaction do not fail their own WATCH} {
        r set w 1
        r watch w
        r multi
        r set w 2
        r set w 3
        assert_equal {OK OK} [r exec]
        r get w
    } {3}

    test {RESP3: EXEC failed by WATCH is a null} {
        set other [redis_client]
        r hello 3
        r set w 1
        r watch w
        $other set w 2
        r multi
        r ping
        assert_equal {} [r exec]
        assert_equal {_} [r lastheader]
        r multi
        r set w 3
        r get w
        assert_equal {OK 3} [r exec]
        r hello 2
        $other close
    }

    test {Errors while queueing still fail a doomed WATCH with nil, queueing errors first} {
        set other [redis_client]
        r set w 1
        r watch w
        $other set w 2
        r multi
        assert_error {ERR unknown command*} {r nosuchcommand}
        # A refused command makes it EXECABORT, whatever WATCH says.
        assert_error {EXECABORT*} {r exec}
        $other close
    }

    # ---- redis-py -------------------------------------------------------------

    test {redis-py: pipelines, WATCH/WatchError and transaction()} {
        set py [find_program /usr/bin/python3]
        if {$py eq ""} { skip "/usr/bin/python3 is not installed" }
        if {[catch {exec $py -c "import redis"}]} { skip "redis-py is not installed for /usr/bin/python3" }
        set tl [expr {[find_program timeout] ne "" ? [list timeout 120] : {}}]
        set script [file join $::harness(testsdir) helpers redis_py_multi.py]
        set rc [catch {exec {*}$tl $py $script [srv 0 host] [srv 0 port] 2>@1} out]
        if {$rc || ![string match "*ALL OK*" $out]} {
            fail "redis-py transactions check failed:\n$out"
        }
        verbose_puts $out
    }

    # ---- COMMAND -----------------------------------------------------------

    test {COMMAND INFO and DOCS of the transaction commands} {
        set info [lindex [r command info watch] 0]
        assert_equal {watch -2} [lrange $info 0 1]
        assert_equal {1 -1 1} [lrange $info 3 5]
        assert {"fast" in [lindex $info 2]}
        set docs [dict get [r command docs watch] watch]
        assert_equal transactions [dict get $docs group]
        assert_equal 2.2.0 [dict get $docs since]
        set arg [lindex [dict get $docs arguments] 0]
        assert_equal key [dict get $arg name]
        assert_equal key [dict get $arg type]
        assert_equal 0 [dict get $arg key_spec_index]
        assert_equal multiple [dict get $arg flags]
        foreach c {multi exec discard unwatch} {
            assert_equal 1 [lindex [r command info $c] 0 1]
            assert_equal transactions [dict get [dict get [r command docs $c] $c] group]
        }
        assert {"skip_slowlog" in [lindex [r command info exec] 0 2]}
    }
}

# ---- Mooncake: store commands, values read in place, refused commands ----------

# INFO from another connection: the default one may be inside MULTI.
proc pool_used {} {
    set c [redis_client]
    set v [get_info_field $c store store_pool_used]
    $c close
    return $v
}

start_server {tags {multi mooncake} overrides {segment-size 16mb}} {
    test {SHM.ATTACH is refused inside MULTI and aborts the transaction} {
        r multi
        assert_error {ERR Command not allowed inside a transaction} {r shm.attach 1}
        assert_error {EXECABORT*} {r exec}
        assert_match {*no_multi*} [lindex [r command info shm.attach] 0 2]
    }

    test {SHUTDOWN is refused inside MULTI, as in Redis} {
        r multi
        assert_error {ERR Command not allowed inside a transaction} {r shutdown}
        assert_error {EXECABORT*} {r exec}
    }

    test {A transaction's queue is bounded by client-query-buffer-limit} {
        # Each queued command's arguments stay in the heap until EXEC: a
        # client that queues forever must not grow the server forever.
        set old [lindex [r config get client-query-buffer-limit] 1]
        r config set client-query-buffer-limit 1mb
        set before [s client_state_limit_refusals]
        set c [redis_client]
        set id [$c client id]
        set big [string repeat x 100000]
        $c multi
        set queued 0
        set err {}
        for {set i 0} {$i < 20} {incr i} {
            if {[catch {$c echo $big} e]} { set err $e; break }
            incr queued
        }
        assert_match {ERR transaction discarded: the queued commands passed client-query-buffer-limit} $err
        assert {$queued >= 9 && $queued < 11}
        # What was queued is freed at once, and the rest is not kept.
        set line [lindex [split [r client list id $id] "\n"] 0]
        assert_match {* multi-mem=0 *} $line
        catch {$c echo $big}
        assert_match {* multi-mem=0 *} [lindex [split [r client list id $id] "\n"] 0]
        assert_error {EXECABORT*} {$c exec}
        assert_equal [expr {$before + 1}] [s client_state_limit_refusals]
        # Values read into the pool are the pool's to bound, not the queue's.
        $c multi
        for {set i 0} {$i < 12} {incr i} { assert_equal QUEUED [$c set qlim:$i $big] }
        assert_equal 12 [llength [$c exec]]
        assert_equal 100000 [r strlen qlim:11]
        $c close
        r config set client-query-buffer-limit $old
    }

    test {client-max-watched-keys bounds one connection's WATCHes} {
        set old [lindex [r config get client-max-watched-keys] 1]
        r config set client-max-watched-keys 3
        set before [s client_state_limit_refusals]
        set c [redis_client]
        assert_equal OK [$c watch w1 w2]
        # Keys already watched do not count again.
        assert_equal OK [$c watch w1 w2 w3]
        assert_error {LIMIT this connection would WATCH more than client-max-watched-keys (3) keys*} {$c watch w4}
        assert_equal [expr {$before + 1}] [s client_state_limit_refusals]
        # The refused WATCH watched nothing: w4 changing does not fail EXEC.
        r set w4 changed
        $c multi
        $c ping
        assert_equal PONG [$c exec]
        # EXEC ended the WATCHes: there is room again, and they still work.
        assert_equal OK [$c watch w4 w5 w6]
        r set w6 changed
        $c multi
        $c ping
        assert_equal {} [$c exec]
        $c close
        r config set client-max-watched-keys $old
    }

    test {CLUSTER topology changes are refused inside MULTI} {
        r multi
        assert_error {ERR Command not allowed inside a transaction} {r cluster addslots 1}
        assert_error {ERR Command not allowed inside a transaction} {r cluster meet 127.0.0.1 1}
        # Reading the topology is not a change: it queues.
        assert_equal QUEUED [r cluster keyslot foo]
        assert_error {EXECABORT*} {r exec}
    }

    test {A large SET inside MULTI (read into the pool in place) is stored at EXEC} {
        set v [pattern_bytes 200000 7]
        set before [s values_read_in_place]
        set other [redis_client]
        r del big
        r multi
        r set big $v
        assert_equal 0 [$other exists big]
        assert_equal {OK} [r exec]
        assert_equal $v [$other get big]
        $other close
        # It did go in place.
        assert_morethan [s values_read_in_place] $before
    }

    test {A large SET inside a DISCARDed MULTI gives its pool space back} {
        r flushall
        set used [pool_used]
        r multi
        r set big1 [pattern_bytes 300000 1]
        r mset big2 [pattern_bytes 300000 2] small x
        assert_morethan [pool_used] $used
        r discard
        assert_equal 0 [r exists big1 big2 small]
        assert_equal $used [pool_used]
    }

    test {A large SET in a transaction failed by WATCH stores nothing} {
        set other [redis_client]
        r flushall
        set used [pool_used]
        r watch w
        $other set w 1
        set usedw [pool_used]
        r multi
        r set big [pattern_bytes 100000 3]
        assert_equal {} [r exec]
        assert_equal 0 [r exists big]
        assert_equal $usedw [pool_used]
        $other close
    }

    test {A client that disconnects inside MULTI leaves no value behind} {
        r flushall
        set used [pool_used]
        set c [redis_client]
        $c multi
        $c set big [pattern_bytes 100000 4]
        $c close
        wait_for_condition 50 20 {[pool_used] == $used} else {
            fail "pool space of the queued value was not given back"
        }
    }

    test {PUT.START inside MULTI reserves at EXEC; DISCARD reserves nothing} {
        r multi
        r put.start txp 1000
        set res [r exec]
        assert_equal 1 [llength [lindex $res 0]]
        assert_equal OK [r put.revoke txp]
        r multi
        r put.start txq 1000
        r discard
        assert_error {*} {r put.end txq}
    }

    test {A large SEG.WRITE inside MULTI writes nothing until EXEC, nothing after DISCARD} {
        set n 40000
        set a [string repeat A $n]
        set b [string repeat B $n]
        set rep [lindex [r put.start txs $n] 0]
        lassign $rep seg off len
        assert_equal OK [r seg.write $seg $off $a]
        r multi
        assert_equal QUEUED [r seg.write $seg $off $b]
        r discard
        r put.end txs
        assert_equal $a [r get txs]

        set rep [lindex [r put.start txs2 $n] 0]
        lassign $rep seg off len
        r seg.write $seg $off $a
        r multi
        r seg.write $seg $off $b
        r put.end txs2
        assert_equal {OK OK} [r exec]
        assert_equal $b [r get txs2]
    }

    test {REMOVE and PUT.END of a WATCHed key fail EXEC} {
        set other [redis_client]
        r set w 1
        r watch w
        $other remove w
        r multi
        r ping
        assert_equal {} [r exec]

        r watch w2
        set rep [lindex [$other put.start w2 10] 0]
        $other seg.write [lindex $rep 0] [lindex $rep 1] 0123456789
        $other put.end w2
        r multi
        r ping
        assert_equal {} [r exec]
        $other close
    }

    test {Eviction of a WATCHed key fails EXEC} {
        r flushall
        r config set maxmemory 2mb
        r set w [pattern_bytes 100000 5]
        r watch w
        set other [redis_client]
        # Fill the pool: the oldest values, w first, are evicted.
        for {set i 0} {$i < 60} {incr i} { $other set fill:$i [pattern_bytes 100000 $i] }
        assert_equal 0 [$other exists w]
        r multi
        r ping
        assert_equal {} [r exec]
        $other close
        r config set maxmemory 0
        r flushall
    }
}

start_server {tags {multi acl}} {
    test {A command the user may not run, queued in MULTI, is refused and aborts the EXEC} {
        r acl setuser alice on >pw ~a:* +@all
        set c [redis_client]
        $c auth alice pw
        assert_equal OK [$c multi]
        assert_equal QUEUED [$c set a:1 x]
        assert_error {NOPERM*} {$c set b:1 x}
        assert_error {EXECABORT*} {$c exec}
        assert_equal 0 [r exists a:1 b:1]
        $c close
    }

    test {EXEC the user may not run is EXECABORT and ends the transaction} {
        r acl setuser carol on >pw ~* +@all -exec
        set c [redis_client]
        $c auth carol pw
        $c del t:1
        assert_equal OK [$c multi]
        assert_equal QUEUED [$c set t:1 x]
        assert_error {EXECABORT*NOPERM*exec*} {$c exec}
        # Not in MULTI any more: commands run at once, DISCARD has nothing to drop.
        assert_equal PONG [$c ping]
        assert_equal 0 [$c exists t:1]
        assert_error {ERR DISCARD without MULTI} {$c discard}
        # Outside MULTI too, a refused EXEC says EXECABORT, as in Redis.
        assert_error {EXECABORT*NOPERM*} {$c exec}
        $c close
        r acl deluser carol
    }

    test {Rules changed between MULTI and EXEC: EXEC checks each command again (ACL LOG context multi)} {
        r acl log reset
        r acl setuser bob on >pw ~* +@all
        set c [redis_client]
        $c auth bob pw
        assert_equal OK [$c multi]
        assert_equal QUEUED [$c set k:1 x]
        assert_equal QUEUED [$c get k:1]
        assert_equal QUEUED [$c set other:1 y]
        # Another connection takes SET away, and then the keys other than k:*.
        r acl setuser bob -set
        r acl setuser bob resetkeys ~k:*
        set res [$c exec]
        assert_equal 3 [llength $res]
        assert_match {NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to execute the command or subcommand} [lindex $res 0]
        assert_equal {} [lindex $res 1]
        assert_match {NOPERM ACLs rules changed*no permission to execute the command or subcommand} [lindex $res 2]
        assert_equal 0 [r exists k:1 other:1]
        set entry [lindex [r acl log 1] 0]
        assert_equal multi [dict get $entry context]
        assert_equal command [dict get $entry reason]
        assert_equal set [dict get $entry object]
        assert_equal 2 [dict get $entry count]
        # A key taken away: the reason names the keys.
        r acl setuser bob +set resetkeys ~*
        assert_equal OK [$c multi]
        assert_equal QUEUED [$c set other:2 y]
        r acl setuser bob resetkeys ~k:*
        set res [$c exec]
        assert_match {NOPERM ACLs rules changed*no permission to touch the specified keys} [lindex $res 0]
        assert_equal key [dict get [lindex [r acl log 1] 0] reason]
        assert_equal 0 [r exists other:2]
        # Outside a transaction the log's context is toplevel still.
        catch {$c set other:3 y}
        assert_equal toplevel [dict get [lindex [r acl log 1] 0] context]
        $c close
    }
}
