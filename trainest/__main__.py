from trainest.cli import main

main()
